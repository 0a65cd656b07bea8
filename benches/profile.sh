#!/usr/bin/env bash
# CPU profile of one leasehold bench measurement, by component: runs
# `leasehold-lab bench` (target/release/leasehold-lab) on a 3-node cluster of
# BINARY (64 clients on distinct names, or on the hot name; following the
# leader, or with SYSTEM leasehold-3-spread each client on one node in turn,
# so two requests in three are forwarded), attaches
# `perf record` to the three nodes and the harness while the measurement
# runs, and writes a breakdown to OUT/profile.md (self time per component,
# from symbol names). Needs perf (linux-perf) and a release build.
#
#   benches/profile.sh [BINARY] [OUT] [WORKLOAD] [SYSTEM]
#       (defaults: target/release/leasehold, benches/results, distinct,
#        leasehold-3; WORKLOAD hot writes OUT/profile-hot.md, SYSTEM
#        leasehold-3-spread OUT/profile-spread.md (or profile-hot-spread.md);
#        KEEP=1 keeps the perf data and reports in the temporary folder it
#        names)
set -euo pipefail
binary=${1:-target/release/leasehold}
lab="$(dirname "$0")/../target/release/leasehold-lab"
out=${2:-benches/results}
workload=${3:-distinct}
system=${4:-leasehold-3}
case $workload in
    distinct) file=profile title="distinct names" ;;
    hot) file=profile-hot title="one hot name (hand-offs through the queue)" ;;
    *) echo "profile.sh: WORKLOAD is distinct or hot" >&2; exit 2 ;;
esac
case $system in
    leasehold-3) file=$file.md ;;
    leasehold-3-spread) file=$file-spread.md title="$title, clients spread over the nodes" ;;
    *) echo "profile.sh: SYSTEM is leasehold-3 or leasehold-3-spread" >&2; exit 2 ;;
esac
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] && echo "profile.sh: perf data kept in $work" >&2 || rm -rf "$work"' EXIT
seconds=15
LEASEHOLD_BIN="$binary" "$lab" bench --systems "$system" --workloads "$workload" --clients 64 --hot-clients 64 --duration-secs "$seconds" \
    --warmup-ms 3000 --runs 1 --out "$work/bench" >"$work/bench.log" 2>&1 &
bench=$!
# The nodes are the bench's children; wait until all three run and the warm-up is under way.
for _ in $(seq 1 100); do
    nodes=$(ps -o pid= --ppid "$bench" | tr -s ' \n' ',' | sed 's/^,//; s/,$//' || true)
    [ "$(tr "," "\n" <<<"$nodes" | grep -c . || true)" -ge 3 ] && break
    sleep 0.2
done
sleep 4
# One recording for the nodes, one for the harness (perf names threads, not processes).
perf record -F 499 -p "$nodes" -o "$work/servers.data" -- sleep $((seconds - 4)) 2>"$work/perf-servers.log" &
perf record -F 499 -p "$bench" -o "$work/client.data" -- sleep $((seconds - 4)) 2>"$work/perf-client.log"
wait %2 2>/dev/null || true
wait "$bench"
result=$(grep "cycles/s" "$work/bench.log" | head -1)
for side in servers client; do
    perf report -i "$work/$side.data" --no-children --sort dso,sym --stdio -q 2>/dev/null >"$work/$side.txt"
done
python3 - "$work" "$result" "$out/$file" "$title" <<'PY'
import re, sys
work, result, out, title = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
# Component of a sample from the harness (client) or a node, by symbol.
rules = [
    ("Raft log writer (frames, fdatasync)", r"log_store|fdatasync|ext4_sync|jbd2|blk_|nvme|virtio_blk|file_write_iter|iowrite"),
    ("openraft core and replication", r"openraft::"),
    ("state machine apply (lock core, events)", r"leasehold_core::|state_machine|LockTable|turns::"),
    ("proposer", r"proposer::"),
    ("JSON (serde_json)", r"serde_json::|serde::"),
    ("HTTP server (hyper, axum, middleware)", r"hyper::proto|hyper::server|axum::|tower::|hyper_util::server|leasehold::api::|leasehold::server"),
    ("HTTP client (reqwest, hyper client)", r"reqwest::|hyper::client|hyper_util::client|h2::"),
    ("metrics (prometheus-client)", r"prometheus_client::|leasehold::metrics"),
    ("tokio runtime (scheduler, timers, wakeups)", r"tokio::runtime|tokio::time|tokio::sync|parking_lot|futex|schedule|__schedule|try_to_wake_up|finish_task_switch|epoll|do_futex"),
    ("kernel networking (loopback TCP)", r"tcp_|__tcp|ip_|__dev_queue|loopback|sock_|__sys_sendto|__sys_recvfrom|skb|net_rx|__netif|inet_"),
    ("memory allocation", r"malloc|_int_free|free|cfree|realloc|memcpy|memmove|__memset|alloc::"),
]
totals = {}
others = {}
for side, label in (("servers", "servers (3 nodes)"), ("client", "client (harness)")):
    for line in open(f"{work}/{side}.txt"):
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*)", line)
        if not m:
            continue
        pct, dso, sym = float(m.group(1)), m.group(2), m.group(3).strip()
        comp = next((name for name, pat in rules if re.search(pat, sym)), None)
        if comp is None:
            comp = "kernel, other" if "kernel" in dso else "other"
            others[(label, sym)] = others.get((label, sym), 0.0) + pct
        key = (label, comp)
        totals[key] = totals.get(key, 0.0) + pct
total = 100.0
lines = [f"# CPU profile: leasehold-3, {title}, 64 clients", "",
         "`benches/profile.sh` — perf at 499 Hz on the three nodes and the harness (all clients) for the measured window;",
         "self time of each sample, grouped by the symbol's component.", "",
         f"Measurement: `{result.strip()}`", "",
         "| side | component | share of samples |", "|---|---|---:|"]
for (side, comp), pct in sorted(totals.items(), key=lambda kv: (kv[0][0], -kv[1])):
    lines.append(f"| {side} | {comp} | {pct / total * 100:.1f} % |")
lines += ["", "Shares are of each side's own samples (each side sums to 100 %). Largest unclassified symbols:", ""]
for (side, sym), pct in sorted(others.items(), key=lambda kv: -kv[1])[:12]:
    lines.append(f"- {side}: {pct:.1f} % `{sym[:100]}`")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
