#!/usr/bin/env bash
# Build, lint and test the Go client. Exits non-zero on any failure.
#
# Needs Go 1.19 or newer (Debian's golang-go; .ci/install-test-deps installs
# it) and nothing else: the module uses the standard library only, so it
# builds offline. Checks gofmt and go vet, builds the conformance driver
# (build/leasehold-conformance, which clients/conformance/drivers/go runs), then
# runs go test with the race detector (it needs cgo: the C compiler the Rust
# build links with). The tests start real `leasehold serve` processes from
# $LEASEHOLD_BIN, else ../../target/debug/leasehold (run `cargo build`
# first). Extra arguments go to go test, e.g. `./run-tests.sh -run Session -v`.
set -euo pipefail
cd "$(dirname "$0")"

echo "== gofmt -l"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
    echo "not gofmt'ed: $unformatted" >&2
    exit 1
fi
echo "== go vet"
go vet ./...
echo "== go build (conformance driver)"
go build -o build/leasehold-conformance ./cmd/leasehold-conformance
echo "== go test -race"
LEASEHOLD_BIN=${LEASEHOLD_BIN:-$PWD/../../target/debug/leasehold} go test -race -count=1 -timeout 180s "$@" ./...
