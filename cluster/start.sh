#!/usr/bin/env bash
# Start (or restart) a local leasehold cluster in the background.
#
#   start.sh [3|5] [DATA_DIR]        defaults: 3 nodes, ./data-cluster
#
# Nodes come from cluster/nodes3.env or nodes5.env. On the first start (no
# node data in DATA_DIR) node 1 initializes the cluster from --peers
# (--initial-cluster-state new); later starts reuse each node's data and
# never initialize. Nodes added later with add-node.sh are
# restarted too; nodes removed by replace-node.sh are not. A node that is
# already running is left alone. Waits (bounded) until a leader is elected.
#
# Environment: LEASEHOLD_BIN (binary), LEADER_TIMEOUT (seconds, default 30).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

usage() {
    echo "usage: $PROG [3|5] [DATA_DIR]" >&2
    exit 2
}
size=${1:-3}
case "$size" in
    3 | 5) ;;
    *) usage ;;
esac
[[ $# -le 2 ]] || usage
data=$(abs_dir "${2:-./data-cluster}")
timeout=${LEADER_TIMEOUT:-30}
envfile="$SCRIPT_DIR/nodes$size.env"
[[ -r "$envfile" ]] || die "cannot read $envfile"

PEERS='' TICK_MS=''
# shellcheck source=nodes3.env
. "$envfile"
[[ -n "$PEERS" && -n "$TICK_MS" ]] || die "$envfile must set PEERS and TICK_MS"
log "binary: $(find_bin)"

ids=() addrs=()
IFS=, read -r -a peer_list <<<"$PEERS"
for peer in "${peer_list[@]}"; do
    ids+=("${peer%%=*}")
    addrs+=("${peer#*=}")
done

# First start of this cluster, or a restart? A restart must never start a
# listed node with an empty store: its Raft state (votes, log) would be lost.
fresh=1
for nd in "$data"/node*/; do
    if [[ -d "$nd" ]]; then fresh=0; fi
done

failed=0
started=() endpoints=() running=0

# start_one ID ADDR [serve flags...]: starts one node and keeps the tally;
# start-node.sh exits 3 for a node that already runs.
start_one() {
    local id=$1 addr=$2 rc=0
    shift 2
    endpoints+=("$addr")
    "$SCRIPT_DIR/start-node.sh" "$id" "$addr" "$data" --tick-ms "$TICK_MS" "$@" || rc=$?
    case $rc in
        0) started+=("$id"); running=$((running + 1)) ;;
        3) running=$((running + 1)) ;;
        *) failed=1 ;;
    esac
}
for i in "${!ids[@]}"; do
    id=${ids[$i]} addr=${addrs[$i]}
    if [[ -e "$data/node$id.removed" ]]; then
        log "node $id: skipped, it was removed from the cluster (see $data/node$id.removed)"
        continue
    fi
    if ((!fresh)) && [[ ! -d "$data/node$id" ]]; then
        log "node $id: NOT started: $data has data of other nodes but none for node $id."
        log "  Starting it empty would forget its Raft votes. Replace it with a new id instead:"
        log "  $SCRIPT_DIR/replace-node.sh $id NEW_ID NEW_ADDR $data ENDPOINT"
        failed=1
        continue
    fi
    # Only the first start may form the cluster: on a restart, a node that
    # lost its folder must not initialize a second one.
    if ((fresh)); then
        start_one "$id" "$addr" --peers "$PEERS" --initial-cluster-state new
    else
        start_one "$id" "$addr" --peers "$PEERS"
    fi
done

# Nodes added later by add-node.sh (not in the env file): restart those with data.
for addrfile in "$data"/node*.addr; do
    [[ -f "$addrfile" ]] || continue
    name=$(basename -- "$addrfile" .addr)
    id=${name#node}
    [[ "$id" =~ ^[0-9]+$ ]] || continue
    if [[ " ${ids[*]} " == *" $id "* || -e "$data/node$id.removed" || ! -d "$data/node$id" ]]; then
        continue
    fi
    start_one "$id" "$(<"$addrfile")"
done

((running > 0)) || die "no node is running; see the messages above and $data/node*.log"
joined=$(IFS=,; echo "${endpoints[*]}")
log "started nodes: ${started[*]:-none}; waiting up to ${timeout}s for a leader"
if ! leader=$(wait_leader "$joined" "$timeout"); then
    log "no leader after ${timeout}s; nodes keep running. Check the logs: $data/node*.log"
    log "stop them with: $SCRIPT_DIR/stop.sh $data"
    exit 1
fi
leader_id=$(json 'd["id"]' <<<"$leader")
voters=$(json '[m["id"] for m in d["members"] if m["voter"]]' <<<"$leader")
term=$(json 'd["term"]' <<<"$leader")
echo "leader: node $leader_id (term $term); voters: $voters"
echo "data:   $data"
echo "endpoints: $joined"
echo "try:    leasehold status --endpoints $joined"
echo "stop:   $SCRIPT_DIR/stop.sh $data"
exit "$failed"
