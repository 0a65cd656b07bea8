#!/usr/bin/env bash
# The whole test suite, the README's one test command (`.ci/run` runs it):
# installs what the tests need (or says how), then formatting, lints, the
# crate-boundary check, every Rust test (unit tests of every crate, openraft's
# storage Suite, the in-process API tests, and the multi-process tests under
# tests/cluster, tests/lab and crates/lab/tests (the leasehold-lab binary's),
# which start real `leasehold serve` processes on loopback or in network
# namespaces), the Python client's tests against a
# real cluster of the binary just built, the Debian package built, installed,
# started and purged (.ci/package-test), and Schemathesis against a live
# 3-node cluster from its /openapi.json (.ci/schemathesis).
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

step .ci/install-test-deps
step cargo fmt --check
step cargo clippy --all-targets -- -D warnings
step .ci/check-boundaries
step cargo test --no-run
# cargo-deb (for .ci/package-test) compiles from crates.io while the tests
# run, which mostly wait on the processes they started: a couple of minutes
# of CI that would otherwise come on top.
if ! command -v cargo-deb >/dev/null; then
    echo "test.sh: installing cargo-deb in the background (log: target/cargo-deb-install.log)" >&2
    cargo install cargo-deb --locked >target/cargo-deb-install.log 2>&1 &
    cargo_deb=$!
fi
step cargo test
step env LEASEHOLD_BIN="$PWD/target/debug/leasehold" clients/python/run-tests.sh
if [ -n "${cargo_deb:-}" ] && ! wait "$cargo_deb"; then
    tail -20 target/cargo-deb-install.log >&2
    echo "test.sh: cargo install cargo-deb failed" >&2
    exit 1
fi
step .ci/package-test
step .ci/schemathesis
