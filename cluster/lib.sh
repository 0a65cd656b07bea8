# shellcheck shell=bash
# Helpers shared by the cluster/*.sh scripts. Sourced, not run.
#
# Layout of a cluster data folder DATA_DIR:
#   DATA_DIR/nodeN/         sled database of node N (never delete it while N is a member)
#   DATA_DIR/nodeN.pid      PID of the running `leasehold serve` of node N
#   DATA_DIR/nodeN.log      its stderr/stdout (appended across restarts)
#   DATA_DIR/nodeN.addr     its host:port (lets start.sh restart nodes added later)
#   DATA_DIR/nodeN.removed  marker written by replace-node.sh: N left the cluster

PROG=$(basename "$0")
SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
# FAIL_HINT, when set, is printed after a fatal error (e.g. how to clean up).
FAIL_HINT=
die() {
    log "error: $*"
    if [[ -n "$FAIL_HINT" ]]; then log "$FAIL_HINT"; fi
    exit 1
}

# find_bin: prints the leasehold binary to use.
find_bin() {
    local candidate
    if [[ -n "${LEASEHOLD_BIN:-}" ]]; then
        [[ -x "$LEASEHOLD_BIN" ]] || die "LEASEHOLD_BIN=$LEASEHOLD_BIN is not an executable file"
        printf '%s\n' "$LEASEHOLD_BIN"
        return 0
    fi
    if candidate=$(command -v leasehold 2>/dev/null); then
        printf '%s\n' "$candidate"
        return 0
    fi
    # Both built: take the newer one (a stale release build is a common trap).
    local release="$SCRIPT_DIR/../target/release/leasehold" debug="$SCRIPT_DIR/../target/debug/leasehold"
    if [[ -x "$release" && -x "$debug" && "$debug" -nt "$release" ]]; then
        candidate=$debug
    elif [[ -x "$release" ]]; then
        candidate=$release
    elif [[ -x "$debug" ]]; then
        candidate=$debug
    else
        candidate=
    fi
    if [[ -n "$candidate" ]]; then
        (cd -- "$(dirname -- "$candidate")" && printf '%s/leasehold\n' "$(pwd -P)")
        return 0
    fi
    die "leasehold binary not found: set LEASEHOLD_BIN, put leasehold on PATH, or run 'cargo build'"
}

# abs_dir DIR: creates DIR if needed and prints its absolute path.
abs_dir() {
    mkdir -p -- "$1" || die "cannot create $1"
    (cd -- "$1" && pwd -P)
}

# existing_dir DIR: prints the absolute path of an existing DIR, or dies.
existing_dir() {
    [[ -d "$1" ]] || die "data folder $1 does not exist"
    (cd -- "$1" && pwd -P)
}

check_id() {
    [[ "$1" =~ ^[1-9][0-9]{0,18}$ ]] || die "node id '$1' is not a positive integer"
}

check_addr() {
    [[ "$1" =~ ^([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$ ]] || die "address '$1' is not host:port"
}

# admin_header: the admin token (LEASEHOLD_ADMIN_TOKEN_FILE, else
# LEASEHOLD_ADMIN_TOKEN) as an authorization header line, if there is one.
admin_header() {
    local token=${LEASEHOLD_ADMIN_TOKEN:-}
    [[ -z "${LEASEHOLD_ADMIN_TOKEN_FILE:-}" ]] || token=$(<"$LEASEHOLD_ADMIN_TOKEN_FILE")
    [[ -z "$token" ]] || printf 'authorization: Bearer %s\n' "$token"
}

# http METHOD URL [JSON_BODY [MAX_SECONDS]]: sets HTTP_CODE ("000" when the
# node could not be reached), HTTP_BODY and HTTP_ERR (why, when 000). Never fails.
HTTP_CODE=000
HTTP_BODY=
HTTP_ERR=
http() {
    local method=$1 url=$2 body=${3:-} max=${4:-5} out rc=0
    local -a args=(-sS --noproxy '*' --connect-timeout 2 --max-time "$max" -X "$method" -w '\n%{http_code}')
    if [[ -n "$body" ]]; then
        args+=(-H 'content-type: application/json' --data-binary "$body")
    fi
    # Nodes started with LEASEHOLD_TLS_CERT_FILE serve https only, trusted
    # through LEASEHOLD_CA_FILE; the admin token, if set, goes along, handed
    # to curl through a file descriptor so that it never shows in ps (see
    # docs/api.md, Auth and TLS).
    if [[ -n "${LEASEHOLD_TLS_CERT_FILE:-}" ]]; then
        url="https://${url#http://}"
        [[ -z "${LEASEHOLD_CA_FILE:-}" ]] || args+=(--cacert "$LEASEHOLD_CA_FILE")
    fi
    if [[ -n "${LEASEHOLD_ADMIN_TOKEN_FILE:-}${LEASEHOLD_ADMIN_TOKEN:-}" ]]; then
        args+=(-H "@/dev/fd/3")
    fi
    out=$(curl "${args[@]}" "$url" 2>/dev/null 3< <(admin_header)) || rc=$?
    case "$rc" in
        0) HTTP_ERR= ;;
        7) HTTP_ERR="connection refused" ;;
        28) HTTP_ERR="timed out after ${max}s" ;;
        *) HTTP_ERR="curl exit code $rc" ;;
    esac
    if [[ -z "$out" ]]; then
        HTTP_CODE=000
        HTTP_BODY=
    else
        HTTP_CODE=${out##*$'\n'}
        HTTP_BODY=${out%$'\n'*}
        [[ "$HTTP_CODE" =~ ^[0-9]{3}$ ]] || HTTP_CODE=000
    fi
}

# json EXPR: evaluates the Python expression EXPR on the JSON document read
# from stdin (bound to d); lists print space-separated, None prints nothing.
json() {
    python3 -c '
import json, sys
d = json.load(sys.stdin)
r = eval(sys.argv[1])
if r is None:
    pass
elif isinstance(r, bool):
    print("true" if r else "false")
elif isinstance(r, (list, tuple)):
    print(" ".join(str(x) for x in r))
else:
    print(r)
' "$1"
}

# status_of ADDR: prints ADDR's /v1/cluster/status JSON; fails if unreachable.
status_of() {
    http GET "http://$1/v1/cluster/status"
    [[ "$HTTP_CODE" == 200 ]] || return 1
    printf '%s\n' "$HTTP_BODY"
}

# self_addr: the address of the node whose status JSON is on stdin.
self_addr() {
    json "next((m['addr'] for m in d['members'] if m['id'] == d['id']), None)"
}

# leader_status ENDPOINTS: tries each comma-separated endpoint, follows it to
# the leader and prints the leader's status JSON; fails when no leader is known.
leader_status() {
    local ep s leader_addr ls
    local -a eps
    IFS=, read -r -a eps <<<"$1"
    for ep in "${eps[@]}"; do
        s=$(status_of "$ep") || continue
        leader_addr=$(json 'd.get("leader_addr")' <<<"$s") || continue
        [[ -n "$leader_addr" ]] || continue
        ls=$(status_of "$leader_addr") || continue
        if [[ $(json 'd["role"].lower() == "leader"' <<<"$ls") == true ]]; then
            printf '%s\n' "$ls"
            return 0
        fi
    done
    return 1
}

# wait_leader ENDPOINTS SECONDS: like leader_status, retrying until SECONDS pass.
wait_leader() {
    local deadline=$((SECONDS + $2))
    while :; do
        leader_status "$1" && return 0
        ((SECONDS < deadline)) || return 1
        sleep 0.5
    done
}

# pid_alive PID: true if PID exists and is not a zombie.
pid_alive() {
    local stat
    kill -0 "$1" 2>/dev/null || return 1
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ "${stat%% *}" != Z ]]
}

# pid_is_node PID ID NODE_DATA: true if PID runs `leasehold serve --id ID
# --data NODE_DATA` (checked on /proc/PID/cmdline, so a stale pid file that
# now names an unrelated process is recognised).
pid_is_node() {
    local pid=$1 id=$2 data=$3 arg prev='' exe=0 serve=0 id_ok=0 data_ok=0
    local -a argv=()
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    mapfile -d '' -t argv <"/proc/$pid/cmdline" || return 1
    ((${#argv[@]} > 0)) || return 1
    [[ "$(basename -- "${argv[0]}")" == *leasehold* ]] && exe=1
    for arg in "${argv[@]}"; do
        case "$arg" in
            serve) serve=1 ;;
            --id="$id") id_ok=1 ;;
            --data="$data") data_ok=1 ;;
            *) ;;
        esac
        [[ "$prev" == --id && "$arg" == "$id" ]] && id_ok=1
        [[ "$prev" == --data && "$arg" == "$data" ]] && data_ok=1
        prev=$arg
    done
    ((exe && serve && id_ok && data_ok))
}

# cmdline_of PID: the command line of PID, for messages.
cmdline_of() {
    tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null || true
}

# running_pid DATA_DIR ID: prints the PID from DATA_DIR/nodeID.pid if that
# process is this node's leasehold; fails otherwise.
running_pid() {
    local pidfile="$1/node$2.pid" pid
    [[ -f "$pidfile" ]] || return 1
    pid=$(<"$pidfile")
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    pid_alive "$pid" || return 1
    pid_is_node "$pid" "$2" "$1/node$2" || return 1
    printf '%s\n' "$pid"
}

# admin_post ENDPOINTS PATH JSON MAX_SECONDS: POSTs to the first endpoint that
# answers (any node forwards admin calls to the leader); dies unless 200.
# The response body is left in HTTP_BODY.
admin_post() {
    local ep
    local -a eps
    IFS=, read -r -a eps <<<"$1"
    for ep in "${eps[@]}"; do
        http POST "http://$ep$2" "$3" "$4"
        case "$HTTP_CODE" in
            000) log "POST $2: no answer from $ep ($HTTP_ERR)" ;;
            200) return 0 ;;
            *) die "POST $2 via $ep failed: HTTP $HTTP_CODE $HTTP_BODY" ;;
        esac
    done
    die "POST $2: no endpoint of $1 answered"
}

# add_learner ENDPOINTS ID ADDR SECONDS: adds a node as a learner; returns once
# the leader has replicated its log (or snapshot) to it.
add_learner() {
    log "adding node $2 ($3) as a learner (up to ${4}s)"
    admin_post "$1" /v1/cluster/learners "{\"id\":$2,\"addr\":\"$3\"}" "$4"
}

# wait_cluster ENDPOINTS SECONDS PY_EXPR: waits until the leader's status
# satisfies the Python expression PY_EXPR (on d); prints that status.
wait_cluster() {
    local deadline=$((SECONDS + $2)) s
    while :; do
        if s=$(leader_status "$1") && [[ $(json "$3" <<<"$s") == true ]]; then
            printf '%s\n' "$s"
            return 0
        fi
        ((SECONDS < deadline)) || return 1
        sleep 0.5
    done
}

# members_summary: one line per member from a status JSON on stdin.
members_summary() {
    python3 -c '
import json, sys
d = json.load(sys.stdin)
for m in d["members"]:
    role = "voter" if m["voter"] else "learner"
    lead = "  (leader)" if m["id"] == d.get("leader") else ""
    print("  node %s  %-21s %s%s" % (m["id"], m["addr"], role, lead))
'
}

# check_new_member ID ADDR DATA STATUS_JSON: refuses an id that is already a
# member under another address, or that was replaced earlier.
check_new_member() {
    local id=$1 addr=$2 data=$3 status=$4 known_addr
    known_addr=$(json "next((m['addr'] for m in d['members'] if m['id'] == $id), None)" <<<"$status")
    if [[ -n "$known_addr" && "$known_addr" != "$addr" ]]; then
        die "node $id is already a member with address $known_addr (not $addr); pick another id"
    fi
    if [[ -e "$data/node$id.removed" ]]; then
        die "node $id was removed from this cluster earlier ($data/node$id.removed); use a new id"
    fi
}
