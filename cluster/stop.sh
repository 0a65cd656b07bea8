#!/usr/bin/env bash
# Stop leasehold nodes started by start.sh / start-node.sh.
#
#   stop.sh [DATA_DIR] [ID...]       defaults: ./data-cluster, every node with a pid file
#
# Signals exactly the PIDs recorded in DATA_DIR/nodeN.pid, and only after
# checking (via /proc/PID/cmdline) that the PID still is `leasehold serve`
# for node N with data DATA_DIR/nodeN: a stale pid file never kills an
# unrelated process. SIGTERM first (graceful), SIGKILL after STOP_TIMEOUT
# seconds (default 5). Removes the pid files. Node data is kept.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

case "${1:-}" in
    -h | --help)
        echo "usage: $PROG [DATA_DIR] [ID...]" >&2
        exit 2
        ;;
    *) ;;
esac
data=$(existing_dir "${1:-./data-cluster}")
if [[ $# -gt 0 ]]; then shift; fi
timeout=${STOP_TIMEOUT:-5}

ids=()
if [[ $# -gt 0 ]]; then
    for id in "$@"; do
        check_id "$id"
        ids+=("$id")
    done
else
    for pidfile in "$data"/node*.pid; do
        [[ -f "$pidfile" ]] || continue
        name=$(basename -- "$pidfile" .pid)
        ids+=("${name#node}")
    done
fi
if [[ ${#ids[@]} -eq 0 ]]; then
    log "no pid files in $data: nothing to stop"
    exit 0
fi

# wait_gone PID SECONDS: true once PID has exited.
wait_gone() {
    local deadline=$((SECONDS + $2))
    while pid_alive "$1"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.1
    done
}

failed=0
for id in "${ids[@]}"; do
    pidfile="$data/node$id.pid"
    if [[ ! -f "$pidfile" ]]; then
        log "node $id: no pid file ($pidfile); not running from here"
        continue
    fi
    pid=$(<"$pidfile")
    if [[ ! "$pid" =~ ^[0-9]+$ ]]; then
        log "node $id: pid file holds '$pid', not a pid; removing it"
        rm -f -- "$pidfile"
        continue
    fi
    if ! pid_alive "$pid"; then
        log "node $id: pid $pid is not running (stale pid file); removing it"
        rm -f -- "$pidfile"
        continue
    fi
    if ! pid_is_node "$pid" "$id" "$data/node$id"; then
        log "node $id: pid $pid is not this leasehold node (it runs: $(cmdline_of "$pid")); NOT signalling it, removing the stale pid file"
        rm -f -- "$pidfile"
        continue
    fi
    kill -TERM "$pid" 2>/dev/null || true
    if wait_gone "$pid" "$timeout"; then
        log "node $id: stopped (pid $pid)"
    else
        # Re-check before SIGKILL: the PID must still be this node.
        if pid_alive "$pid" && pid_is_node "$pid" "$id" "$data/node$id"; then
            log "node $id: still running after ${timeout}s; sending SIGKILL to pid $pid"
            kill -KILL "$pid" 2>/dev/null || true
            if ! wait_gone "$pid" 5; then
                log "node $id: pid $pid survived SIGKILL; keeping its pid file"
                failed=1
                continue
            fi
        fi
        log "node $id: stopped (pid $pid)"
    fi
    rm -f -- "$pidfile"
done
exit "$failed"
