#!/usr/bin/env bash
# Where one hand-off of the hot lock spends its time: runs `leasehold-lab
# bench` (target/release/leasehold-lab) on the hot name with a few clients
# (2 by default: the hand-offs then run one after another, and each one is a
# chain of thread wake-ups across the harness and the three nodes), records
# the scheduler's wake-ups for 2 s (`perf sched record`), and writes
# OUT/chain.md: for each step of the chain (a thread woken by one thread
# waking the next), how often it happened and how long it took, with the
# nodes' own histograms over the same window (entry commit, log flush, time
# between a grant and the release). Needs perf (linux-perf), ss (iproute2),
# curl and a release build.
#
#   benches/chain.sh [BINARY] [OUT] [SYSTEM] [CLIENTS]
#       (defaults: target/release/leasehold, benches/results, leasehold-3,
#        2; SYSTEM leasehold-3-spread, each client on one node in turn,
#        writes OUT/chain-spread.md; KEEP=1 keeps the recording in the
#        temporary folder it names)
set -euo pipefail
binary=${1:-target/release/leasehold}
lab="$(dirname "$0")/../target/release/leasehold-lab"
out=${2:-benches/results}
system=${3:-leasehold-3}
clients=${4:-2}
case $system in
    leasehold-3) file=chain.md ;;
    leasehold-3-spread) file=chain-spread.md ;;
    *) echo "chain.sh: SYSTEM is leasehold-3 or leasehold-3-spread" >&2; exit 2 ;;
esac
mkdir -p "$out"
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] && echo "chain.sh: recording kept in $work" >&2 || rm -rf "$work"' EXIT
LEASEHOLD_BIN="$binary" "$lab" bench --systems "$system" --workloads hot --hot-clients "$clients" --duration-secs 12 \
    --warmup-ms 2000 --runs 1 --out "$work/bench" >"$work/bench.log" 2>&1 &
bench=$!
# The nodes are the bench's children; wait until all three run and the warm-up is over.
for _ in $(seq 1 100); do
    nodes=$(ps -o pid= --ppid "$bench" | tr -s ' \n' ' ' || true)
    [ "$(wc -w <<<"$nodes")" -ge 3 ] && break
    sleep 0.2
done
sleep 5
# Which process is which: each thread's process, and each node's metrics
# (the leader says `leasehold_raft_is_leader 1`).
for p in $nodes $bench; do
    for t in /proc/"$p"/task/*; do echo "$p ${t##*/} $(cat "$t/comm" 2>/dev/null | tr ' ' '_')"; done
done >"$work/threads"
metrics() {
    for p in $nodes; do
        for port in $(ss -ltnpH | grep "pid=$p," | awk '{print $4}' | sed 's/.*://'); do
            curl -s -m 2 "http://127.0.0.1:$port/metrics" 2>/dev/null |
                grep -E "^leasehold_(raft_is_leader|entry_commit_seconds_(sum|count)|log_flush_seconds_(sum|count)|hold_seconds_(sum|count)) " |
                sed "s/^/$p /" || true
        done
    done
}
metrics >"$work/metrics-before"
perf sched record -a -o "$work/sched.data" -- sleep 2 >"$work/perf.log" 2>&1
metrics >"$work/metrics-after"
wait "$bench"
result=$(grep "cycles/s" "$work/bench.log" | head -1)
perf script -i "$work/sched.data" -F tid,time,event,trace 2>/dev/null | grep "sched:sched_waking" >"$work/wakings" || true
# The command as committed with the results (no machine-specific paths).
shown() { case $1 in /*) echo "$2" ;; *) echo "$1" ;; esac; }
command="benches/chain.sh $(shown "$binary" BINARY) $(shown "$out" OUT) $system $clients"
python3 - "$work" "$bench" "$result" "$out/$file" "$system" "$clients" "$command" <<'PY'
import re, statistics, sys
from collections import defaultdict

work, bench, result, out, system, clients, command = sys.argv[1:8]

# Roles: C the harness (clients), L the leader's runtime thread and Lw its
# log writer, F a follower's runtime thread and Fw its log writer. A node
# runs one runtime thread (its process id) next to its log writer.
leader = None
for line in open(f"{work}/metrics-after"):
    pid, name, value = line.split()[:3]
    if name == "leasehold_raft_is_leader" and float(value) == 1:
        leader = pid
if leader is None:
    sys.exit("chain.sh: no node said it leads")
role, node_of = {}, {}
for line in open(f"{work}/threads"):
    pid, tid, comm = line.split()[:3]
    if pid == bench:
        role[tid] = "C"
        continue
    kind = "L" if pid == leader else "F"
    if tid == pid:
        role[tid] = kind
    elif comm.startswith("leasehold-log-w"):
        role[tid] = kind + "w"
    else:
        continue
    node_of[tid] = pid

def intentional(waker, wakee):
    """Whether `waker` woke `wakee` itself (a message, a queued write, a
    write reported done), not by finishing a disk request of `wakee`'s in
    its interrupt context: a log writer wakes only its own runtime thread,
    and only a node's own runtime thread hands its writer work."""
    if role[waker].endswith("w"):
        return node_of[waker] == node_of.get(wakee) and not role[wakee].endswith("w")
    if role[wakee].endswith("w"):
        return node_of.get(waker) == node_of[wakee]
    return True


# Each wake-up among these threads, in time order: (time, waker, wakee).
edges = []
for line in open(f"{work}/wakings"):
    m = re.match(r"\s*(\d+)\s+([\d.]+):\s+sched:sched_waking:.*\bpid=(\d+)", line)
    if m and m.group(1) in role and m.group(3) in role and m.group(1) != m.group(3):
        if intentional(m.group(1), m.group(3)):
            edges.append((float(m.group(2)), m.group(1), m.group(3)))
edges.sort()

# A step: thread X, woken by W at t0, wakes Y at t1. Its cause is the last
# wake-up of X by one of these threads (wake-ups from the kernel, such as a
# disk's completion, are not steps): the step took t1 - t0. A cause more
# than 10 ms old is none: X woke for something else in between (a timer).
last_woken = {}
steps = defaultdict(list)
for t, waker, wakee in edges:
    cause = last_woken.get(waker)
    if cause is not None and t - cause[0] < 0.01:
        steps[(role[cause[1]], role[waker], role[wakee])].append((t - cause[0]) * 1e6)
    last_woken[wakee] = (t, waker)

names = {
    ("C", "L", "F"): "leader: a client's request in, entry out to a follower",
    ("F", "L", "F"): "leader: a follower's message in, entry (or answer) out to a follower",
    ("C", "L", "Lw"): "leader: a client's request in, entry to its own log writer",
    ("F", "L", "Lw"): "leader: a follower's message in, entry to its own log writer",
    ("L", "F", "Fw"): "follower: entry in, to its log writer",
    ("F", "Fw", "F"): "follower's log writer: write + fdatasync, then back to its runtime",
    ("L", "Lw", "L"): "leader's log writer: write + fdatasync, then back to its runtime",
    ("Fw", "F", "L"): "follower: entry durable, acknowledgement out",
    ("F", "L", "C"): "leader: a follower's message in, answer out to a client",
    ("Lw", "L", "C"): "leader: own write durable, answer out to a client",
    ("L", "C", "L"): "client: answer in, next request out (to the leader)",
    ("C", "F", "L"): "follower: a client's request in, handed to the leader",
    ("L", "F", "C"): "follower: the leader's answer in, answer out to its client",
    ("F", "C", "F"): "client: answer in, next request out (to a follower)",
    ("F", "C", "L"): "client: answer (from a follower) in, next request out to the leader",
    ("L", "C", "F"): "client: answer (from the leader) in, next request out to a follower",
}
rows = []
for key, gaps in steps.items():
    if len(gaps) < 20:
        continue
    gaps.sort()
    rows.append((key, len(gaps), statistics.median(gaps), gaps[int(len(gaps) * 0.9)]))
rows.sort(key=lambda r: -r[1])

def delta(name, pid):
    values = {}
    for f in ("before", "after"):
        for line in open(f"{work}/metrics-{f}"):
            p, n, v = line.split()[:3]
            if p == pid and n == name:
                values[f] = float(v)
    return values.get("after", 0) - values.get("before", 0)

def mean_us(hist, pid):
    n = delta(f"leasehold_{hist}_count", pid)
    return delta(f"leasehold_{hist}_sum", pid) / n * 1e6 if n else float("nan")

followers = sorted({p for t, p in node_of.items() if p != leader})
with open(out, "w") as f:
    mode = "each client on one node in turn" if system.endswith("spread") else "clients following the leader"
    f.write(f"# One hand-off of the hot lock, step by step: {system}, {clients} clients ({mode})\n\n")
    f.write(f"`{command}` — `perf sched record` of every thread wake-up for 2 s while `leasehold-lab bench` ")
    f.write("hands the hot name from client to client, and the nodes' own histograms over the same 2 s ")
    f.write("(recording costs CPU: the rate is lower than in an unrecorded run).\n\n")
    f.write(f"The bench's 12 s run, the recorded 2 s among them: `{result.strip()}`\n\n")
    f.write("| node | entry commit, mean µs | log flush (write + fdatasync), mean µs | grant → release applied, mean µs |\n|---|---:|---:|---:|\n")
    for p in [leader] + followers:
        commit = mean_us("entry_commit_seconds", p)
        commit = f"{commit:.0f}" if p == leader else "—"
        f.write(f"| {'leader' if p == leader else 'follower'} | {commit} | {mean_us('log_flush_seconds', p):.0f} | {mean_us('hold_seconds', p):.0f} |\n")
    f.write("\nA step is a thread woken by one thread (first column) waking the next (last column): from its wake-up to the next wake-up it causes. ")
    f.write("C the harness's clients, L the leader's runtime thread, Lw its log writer, F a follower's runtime thread, Fw its log writer. ")
    f.write("Steps seen fewer than 20 times are left out.\n\n")
    f.write("| woken by | thread | wakes | step | count | median µs | p90 µs |\n|---|---|---|---|---:|---:|---:|\n")
    for (by, me, to), n, median, p90 in rows:
        f.write(f"| {by} | {me} | {to} | {names.get((by, me, to), '')} | {n} | {median:.0f} | {p90:.0f} |\n")
print(f"chain.sh: wrote {out}")
PY
