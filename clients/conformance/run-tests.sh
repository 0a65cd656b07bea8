#!/usr/bin/env bash
# The conformance suite: builds the driver of every client that has one
# (clients/conformance/builds/<language>, or clients/conformance/drivers/<language>/build
# when the driver is a folder, for each clients/conformance/drivers/<language>),
# then runs every scenario against each, on a real 3-node cluster behind
# fault-injecting proxies (tests/conformance), and prints the table of
# scenario × language.
#
# LEASEHOLD_CONFORMANCE_DRIVERS=rust,python runs only those languages;
# LEASEHOLD_CONFORMANCE_SCENARIOS=fifo_waiting,session only those scenarios.
# The cluster runs target/debug/leasehold (cargo builds it for the test).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ -n "${LEASEHOLD_CONFORMANCE_DRIVERS:-}" ]; then
    IFS=, read -r -a languages <<<"$LEASEHOLD_CONFORMANCE_DRIVERS"
else
    languages=()
    for driver in clients/conformance/drivers/*; do
        languages+=("$(basename "$driver")")
    done
fi
for language in "${languages[@]}"; do
    for build in "clients/conformance/builds/$language" "clients/conformance/drivers/$language/build"; do
        if [ -f "$build" ] && [ -x "$build" ]; then
            echo "== building the $language driver"
            "$build"
        fi
    done
done
export LEASEHOLD_CONFORMANCE_DRIVERS
LEASEHOLD_CONFORMANCE_DRIVERS=$(IFS=,; echo "${languages[*]}")
echo "== the suite: $LEASEHOLD_CONFORMANCE_DRIVERS"
# --ignored: a plain `cargo test` leaves the suite out, since it needs the
# drivers built first.
# With the features of the build beside it (test.sh sets them), so that
# cargo does not rebuild target/debug/leasehold under the suites running it.
cargo test --quiet ${LEASEHOLD_TEST_FEATURES:+--features "$LEASEHOLD_TEST_FEATURES"} --test conformance -- --ignored --nocapture
