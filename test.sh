#!/usr/bin/env bash
# The whole test suite, the README's one test command (`.ci/run` runs it):
# installs what the tests need (or says how), then formatting, lints, the
# crate-boundary check, every Rust test (unit tests of every crate, openraft's
# storage Suite, the in-process API tests, and the multi-process tests under
# tests/cluster and tests/lab, which start real `leasehold serve` processes on
# loopback or in network namespaces), the Python client's tests against a
# real cluster of the binary just built, the Debian package built, installed,
# started and purged (.ci/package-test), and Schemathesis against a live
# 3-node cluster from its /openapi.json (.ci/schemathesis).
set -euo pipefail
cd "$(dirname "$0")"
.ci/install-test-deps
cargo fmt --check
cargo clippy --all-targets -- -D warnings
.ci/check-boundaries
cargo test
LEASEHOLD_BIN="$PWD/target/debug/leasehold" clients/python/run-tests.sh
.ci/package-test
.ci/schemathesis
