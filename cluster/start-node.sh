#!/usr/bin/env bash
# Start one leasehold node in the background.
#
#   start-node.sh ID ADDR DATA_DIR [--peers id=host:port,...] [--tick-ms MS] [other serve flags]
#
# Runs `leasehold serve --id ID --addr ADDR --data DATA_DIR/nodeID [flags]`,
# records its PID in DATA_DIR/nodeID.pid and appends its output to
# DATA_DIR/nodeID.log, then waits (bounded) until the node answers /healthz.
# Without --peers the node starts uninitialized (to be added with
# add-node.sh, or initialized with POST /v1/cluster/init).
#
# Exit status: 0 started, 3 already running (pid file names a live node), 1 error.
# Environment: LEASEHOLD_BIN (binary), START_TIMEOUT (seconds, default 15).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

usage() {
    echo "usage: $PROG ID ADDR DATA_DIR [--peers id=host:port,...] [--tick-ms MS] [serve flags...]" >&2
    exit 2
}
[[ $# -ge 3 ]] || usage
case "$1" in
    -h | --help) usage ;;
    *) ;;
esac

id=$1 addr=$2
check_id "$id"
check_addr "$addr"
data=$(abs_dir "$3")
shift 3
bin=$(find_bin)
timeout=${START_TIMEOUT:-15}

node_data="$data/node$id"
pidfile="$data/node$id.pid"
logfile="$data/node$id.log"

if [[ -f "$pidfile" ]]; then
    if pid=$(running_pid "$data" "$id"); then
        log "node $id is already running (pid $pid, $pidfile); not starting it again"
        exit 3
    fi
    old=$(<"$pidfile")
    log "removing stale pid file $pidfile (pid ${old:-?} is not a running leasehold node $id)"
    rm -f -- "$pidfile"
fi
if [[ -e "$data/node$id.removed" ]]; then
    die "node $id was removed from the cluster ($data/node$id.removed); use a new id"
fi

# Refuse if something already listens on ADDR (curl exit 7: connection refused).
rc=0
curl -s --noproxy '*' --connect-timeout 1 --max-time 2 -o /dev/null "http://$addr/healthz" || rc=$?
if [[ $rc -ne 7 ]]; then
    die "something already listens on $addr; is another cluster running? (check: ss -ltnp)"
fi

# Only flags given here configure the node: do not inherit these from the caller.
unset LEASEHOLD_PEERS LEASEHOLD_LISTEN

mkdir -p -- "$node_data"
printf '=== %s %s: starting node %s: %s serve --id %s --addr %s --data %s %s\n' \
    "$(date '+%F %T')" "$PROG" "$id" "$bin" "$id" "$addr" "$node_data" "$*" >>"$logfile"
nohup "$bin" serve --id "$id" --addr "$addr" --data "$node_data" "$@" >>"$logfile" 2>&1 </dev/null &
pid=$!
printf '%s\n' "$pid" >"$pidfile.tmp"
mv -f -- "$pidfile.tmp" "$pidfile"
printf '%s\n' "$addr" >"$data/node$id.addr"

# Wait until the node serves HTTP and reports this id.
deadline=$((SECONDS + timeout))
while :; do
    if ! pid_alive "$pid"; then
        log "node $id (pid $pid) exited during startup; last lines of $logfile:"
        tail -n 20 -- "$logfile" >&2 || true
        rm -f -- "$pidfile"
        exit 1
    fi
    http GET "http://$addr/healthz" "" 2
    if [[ "$HTTP_CODE" == 200 ]] && [[ $(json 'd.get("id")' <<<"$HTTP_BODY" 2>/dev/null) == "$id" ]]; then
        break
    fi
    if ((SECONDS >= deadline)); then
        log "node $id (pid $pid) does not answer on $addr after ${timeout}s; it keeps running, see $logfile"
        log "stop it with: $SCRIPT_DIR/stop.sh $data $id"
        exit 1
    fi
    sleep 0.2
done
log "node $id started: pid $pid, addr $addr, data $node_data, log $logfile"
