#!/usr/bin/env bash
# A/B two leasehold binaries in interleaved runs (A B A B ...) of one bench
# measurement each, and print each run and the medians: cycles/s and the
# servers' and clients' CPU µs per cycle (the figure that survives a noisy
# machine). Used to keep or drop a write-path change.
#
#   benches/ab.sh BINARY_A BINARY_B [RUNS] [extra `leasehold-lab bench` args...]
#   e.g. benches/ab.sh /tmp/before target/release/leasehold 5 --clients 64 --workloads distinct
#
# The harness is the one target/release/leasehold-lab (`cargo build
# --release` builds it) for both sides; each side's nodes run its binary
# ($LEASEHOLD_BIN), so a difference is the nodes' alone. AB_SYSTEMS picks
# the one system measured (default leasehold-3; leasehold-3-spread puts the
# clients on every node in turn, so followers forward two requests in three);
# AB_DURATION the measured time of each run (default 8s; 40s holds a share
# of the checkpoints that a node takes every 50 000 entries).
set -euo pipefail
lab="$(dirname "$0")/../target/release/leasehold-lab"
a=$1 b=$2 runs=${3:-5}
shift $(( $# < 3 ? $# : 3 ))
extra=("$@")
[ "${#extra[@]}" -gt 0 ] || extra=(--workloads distinct --clients 64)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for run in $(seq 1 "$runs"); do
    for side in A B; do
        binary=$a; [ "$side" = B ] && binary=$b
        LEASEHOLD_BIN="$binary" "$lab" bench --systems "${AB_SYSTEMS:-leasehold-3}" --duration "${AB_DURATION:-8s}" --warmup-ms 2000 --runs 1 "${extra[@]}" \
            --out "$work/$side-$run" >"$work/$side-$run.log" 2>&1 || { echo "run $run $side failed"; tail -5 "$work/$side-$run.log"; exit 1; }
        line=$(grep "cycles/s" "$work/$side-$run.log" | head -1)
        echo "run $run $side: ${line#bench:   }"
        sed -E 's/.* ([0-9]+) cycles\/s.*servers ([0-9]+) \+ clients ([0-9]+).*/\1 \2 \3/' <<<"$line" >>"$work/$side.txt"
    done
done
for side in A B; do
    sort -n -k1 "$work/$side.txt" | awk -v s="$side" '{ c[NR]=$1 } END { printf "%s median cycles/s %s", s, c[int((NR+1)/2)] }'
    sort -n -k2 "$work/$side.txt" | awk '{ c[NR]=$2 } END { printf ", servers %s µs/cycle", c[int((NR+1)/2)] }'
    sort -n -k3 "$work/$side.txt" | awk '{ c[NR]=$3 } END { printf ", clients %s µs/cycle\n", c[int((NR+1)/2)] }'
done
