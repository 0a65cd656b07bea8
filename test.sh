#!/usr/bin/env bash
# The whole test suite: formatting, lints, then every test (lock core unit
# tests, openraft's storage suite on the sled stores, and the multi-process
# cluster tests, which start real `leasehold serve` processes on loopback).
set -euo pipefail
cd "$(dirname "$0")"
cargo fmt --check
cargo clippy --all-targets -- -D warnings
cargo test
