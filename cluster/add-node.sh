#!/usr/bin/env bash
# Add a new voting node to a running cluster.
#
#   add-node.sh ID ADDR DATA_DIR ENDPOINT[,ENDPOINT...]
#
# 1. starts node ID on ADDR without --peers (uninitialized, data DATA_DIR/nodeID);
# 2. adds it as a learner through ENDPOINT (waits until it caught up);
# 3. promotes it: sets the voters to the current voters + ID.
# ENDPOINT is any running member (host:port); a comma-separated list is tried in order.
#
# Environment: LEASEHOLD_BIN, TICK_MS (default: the leader's tick_ms),
# LEARNER_TIMEOUT (seconds for the learner to catch up, default 120).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

if [[ $# -ne 4 ]]; then
    echo "usage: $PROG ID ADDR DATA_DIR ENDPOINT[,ENDPOINT...]" >&2
    exit 2
fi
id=$1 addr=$2 endpoints=$4
check_id "$id"
check_addr "$addr"
data=$(abs_dir "$3")
learner_timeout=${LEARNER_TIMEOUT:-120}

status=$(leader_status "$endpoints") || die "no leader reachable through $endpoints"
leader_id=$(json 'd["id"]' <<<"$status")
# Talk to the leader first (any member forwards, but it may be down later).
endpoints="$(self_addr <<<"$status"),$endpoints"
is_voter=$(json "any(m['id'] == $id and m['voter'] for m in d['members'])" <<<"$status")
check_new_member "$id" "$addr" "$data" "$status"
tick=${TICK_MS:-$(json 'd.get("tick_ms") or 100' <<<"$status")}
log "leader is node $leader_id; current members:"
members_summary <<<"$status" >&2

# 1. Start the node (already running is fine: e.g. a retry of this script).
rc=0
"$SCRIPT_DIR/start-node.sh" "$id" "$addr" "$data" --tick-ms "$tick" || rc=$?
if ((rc != 0 && rc != 3)); then
    die "could not start node $id"
fi
FAIL_HINT="node $id keeps running; stop it with: $SCRIPT_DIR/stop.sh $data $id"

if [[ "$is_voter" == true ]]; then
    log "node $id is already a voter; nothing to change"
    exit 0
fi

# 2. Learner: the leader replicates its log/snapshot to the node; the call
#    returns once the node has caught up.
add_learner "$endpoints" "$id" "$addr" "$learner_timeout"

# 3. Promote on the leader, which adds it to the voters it has now (no
#    read-modify-write race with another change) and refuses if the new
#    voters could not form a quorum.
log "promoting node $id to voter"
admin_post "$endpoints" "/v1/cluster/members/$id/promote" "" 60

status=$(wait_cluster "$endpoints" 30 "any(m['id'] == $id and m['voter'] for m in d['members'])") ||
    die "node $id is not reported as a voter after 30s"
FAIL_HINT=
log "node $id is a voter now; members:"
members_summary <<<"$status"
