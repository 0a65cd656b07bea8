#!/usr/bin/env bash
# Replace voter OLD_ID by a new node NEW_ID (e.g. OLD lost its disk or host).
#
#   replace-node.sh OLD_ID NEW_ID NEW_ADDR DATA_DIR ENDPOINT[,ENDPOINT...]
#
# 1. starts NEW_ID on NEW_ADDR without --peers and adds it as a learner;
# 2. sets the voters to (current voters - OLD_ID + NEW_ID): OLD_ID leaves the cluster;
# 3. stops OLD_ID through DATA_DIR/nodeOLD_ID.pid (if it still runs from there)
#    and writes DATA_DIR/nodeOLD_ID.removed so start.sh never restarts it.
# OLD_ID may already be dead, as long as the other voters form a majority.
# ENDPOINT must be a running member other than OLD_ID (a list is tried in order).
#
# Environment: LEASEHOLD_BIN, TICK_MS (default: the leader's tick_ms),
# LEARNER_TIMEOUT (seconds, default 120).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

if [[ $# -ne 5 ]]; then
    echo "usage: $PROG OLD_ID NEW_ID NEW_ADDR DATA_DIR ENDPOINT[,ENDPOINT...]" >&2
    exit 2
fi
old=$1 new=$2 addr=$3 endpoints=$5
check_id "$old"
check_id "$new"
check_addr "$addr"
[[ "$old" != "$new" ]] || die "NEW_ID must differ from OLD_ID (a replaced node never comes back under its id)"
data=$(abs_dir "$4")
learner_timeout=${LEARNER_TIMEOUT:-120}

status=$(leader_status "$endpoints") || die "no leader reachable through $endpoints"
leader_id=$(json 'd["id"]' <<<"$status")
# Talk to the leader first (any member forwards, but it may be down later).
endpoints="$(self_addr <<<"$status"),$endpoints"
old_is_member=$(json "any(m['id'] == $old for m in d['members'])" <<<"$status")
new_is_voter=$(json "any(m['id'] == $new and m['voter'] for m in d['members'])" <<<"$status")
check_new_member "$new" "$addr" "$data" "$status"
if [[ "$old_is_member" != true && "$new_is_voter" != true ]]; then
    die "node $old is not a member of the cluster; nothing to replace"
fi
tick=${TICK_MS:-$(json 'd.get("tick_ms") or 100' <<<"$status")}
log "leader is node $leader_id; current members:"
members_summary <<<"$status" >&2

if [[ "$old_is_member" == true ]]; then
    # 1. New node, as a learner that has caught up.
    rc=0
    "$SCRIPT_DIR/start-node.sh" "$new" "$addr" "$data" --tick-ms "$tick" || rc=$?
    if ((rc != 0 && rc != 3)); then
        die "could not start node $new"
    fi
    FAIL_HINT="node $new keeps running; node $old is unchanged. Stop the new node with: $SCRIPT_DIR/stop.sh $data $new"
    add_learner "$endpoints" "$new" "$addr" "$learner_timeout"

    # 2. Swap the voters in one membership change.
    status=$(leader_status "$endpoints") || die "no leader reachable through $endpoints"
    voters=$(json "sorted(({m['id'] for m in d['members'] if m['voter']} - {$old}) | {$new})" <<<"$status")
    voters_json="[${voters// /,}]"
    log "setting voters to $voters_json (removes node $old)"
    admin_post "$endpoints" /v1/cluster/membership "{\"voters\":$voters_json}" 60
else
    log "node $old already left the cluster and node $new is a voter; finishing the cleanup"
fi

# Ask the new node too: the old one may have been the leader (it steps down).
status=$(wait_cluster "$endpoints,$addr" 30 \
    "all(m['id'] != $old for m in d['members']) and any(m['id'] == $new and m['voter'] for m in d['members'])") ||
    die "membership change not visible after 30s (node $old still a member or node $new not a voter)"
FAIL_HINT=
log "node $old left the cluster; members:"
members_summary <<<"$status"

# 3. Stop the old node if it still runs from this data folder, and mark it removed.
if [[ -f "$data/node$old.pid" ]]; then
    "$SCRIPT_DIR/stop.sh" "$data" "$old" || log "warning: could not stop node $old cleanly; check $data/node$old.pid"
else
    log "node $old: no pid file in $data; if it still runs elsewhere, stop it there"
fi
printf 'node %s was replaced by node %s on %s; never restart id %s. Its data (%s) can be deleted.\n' \
    "$old" "$new" "$(date '+%F %T')" "$old" "$data/node$old" >"$data/node$old.removed"
log "marked node $old as removed ($data/node$old.removed); its data $data/node$old is no longer needed"
