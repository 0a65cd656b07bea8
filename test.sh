#!/usr/bin/env bash
# The whole test suite, the README's one test command (`.ci/run` runs it):
# installs what the tests need (or says how), then formatting, lints, the
# crate-boundary check, every Rust test (unit tests of every crate, openraft's
# storage Suite, the in-process API tests, and the multi-process tests under
# tests/cluster, tests/lab and crates/lab/tests (the leasehold-lab binary's),
# which start real `leasehold serve` processes on loopback or in network
# namespaces), the Python (ruff, mypy, pytest), TypeScript (tsc --strict,
# node --test), Go (gofmt, go vet, go test -race) and Java (javac
# -Xlint:all -Werror, JUnit 5) clients' tests against real clusters of the
# binary just built, the conformance suite that holds all five clients to
# one behaviour (clients/conformance/), the Debian package built, installed,
# started and purged (.ci/package-test), and Schemathesis against a live
# 3-node cluster from its /openapi.json (.ci/schemathesis). Those last
# suites run side by side (they mostly wait on their processes), each
# logging to target/test-logs/. The Rust tests include the crash-point test
# (nodes built with the failpoints feature, which the product never enables,
# killed at each crash point of the storage and Raft paths).
set -euo pipefail
cd "$(dirname "$0")"

# Each step says when it starts and how long it took, so a slow CI run shows
# where its time went.
step() {
    local started=$SECONDS
    echo "test.sh: == $*" >&2
    "$@"
    echo "test.sh: == $* took $((SECONDS - started)) s (total $SECONDS s)" >&2
}

# Runs the named functions side by side: the suites that mostly wait on the
# processes they start (clusters, servers, browsers), so on 2 cores they
# finish in about the time of the longest instead of the sum. Each one's
# output goes to target/test-logs/NAME.log; a line says when each ends, and
# the tail of the log of each that failed is printed. Fails if any failed.
side_by_side() {
    local logs=target/test-logs name done_pid status failed=()
    local -A names started
    mkdir -p "$logs"
    for name in "$@"; do
        "$name" >"$logs/$name.log" 2>&1 &
        names[$!]=$name
        started[$name]=$SECONDS
        echo "test.sh: == $name started (log: $logs/$name.log)" >&2
    done
    while [ "${#names[@]}" -gt 0 ]; do
        status=0
        wait -n -p done_pid "${!names[@]}" || status=$?
        name=${names[$done_pid]}
        unset "names[$done_pid]"
        if [ "$status" -eq 0 ]; then
            echo "test.sh: == $name passed in $((SECONDS - started[$name])) s (total $SECONDS s)" >&2
        else
            echo "test.sh: == $name FAILED (status $status) after $((SECONDS - started[$name])) s; end of its log:" >&2
            tail -n 150 "$logs/$name.log" >&2
            failed+=("$name")
        fi
    done
    if [ "${#failed[@]}" -gt 0 ]; then
        echo "test.sh: failed: ${failed[*]} (whole logs in $logs/)" >&2
        return 1
    fi
}

step .ci/install-test-deps
step cargo fmt --check
# With the crash points compiled in (they compile to nothing without the
# feature), so their code is linted too.
step cargo clippy --all-targets --features failpoints -- -D warnings
step .ci/check-boundaries
# One build for every test, with the crash points compiled in (feature
# `failpoints`, which the product build never enables; without FAILPOINTS in
# a node's environment they do nothing), so tests/failpoints.rs runs beside
# the rest instead of after a second build of the server.
# The conformance suite's own cargo call takes the same features
# (LEASEHOLD_TEST_FEATURES), and so does the package test's: with others,
# cargo would relink target/debug/leasehold under the suites that run it.
export LEASEHOLD_TEST_FEATURES=failpoints
step cargo test --features "$LEASEHOLD_TEST_FEATURES" --no-run

rust_tests() { cargo test --features "$LEASEHOLD_TEST_FEATURES"; }
# The clients' own suites, then the conformance suite, which builds every
# driver in the places those suites use (the Python venv, node_modules, the
# Go and Java build folders): one after the other, beside the rest.
clients() {
    export LEASEHOLD_BIN="$PWD/target/debug/leasehold"
    step clients/python/run-tests.sh
    step clients/typescript/run-tests.sh
    step clients/go/run-tests.sh
    step clients/java/run-tests.sh
    step clients/conformance/run-tests.sh
}
# cargo-deb, at the version .ci/install-cargo-deb pins, compiles from
# crates.io first when it is missing, while the other suites wait on their
# processes.
package() {
    .ci/install-cargo-deb --check || .ci/install-cargo-deb
    .ci/package-test
}
schemathesis() { .ci/schemathesis; }
side_by_side rust_tests clients package schemathesis
