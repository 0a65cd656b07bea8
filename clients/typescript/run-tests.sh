#!/usr/bin/env bash
# Type-check, build and test the TypeScript client. Exits non-zero on any
# failure.
#
# Installs the pinned dev tools (TypeScript, Node's types) from
# package-lock.json with `npm ci` (the client itself has no runtime
# dependency), builds the package (tsc --strict, declarations included,
# into dist/), then the tests and the conformance driver (into build/), and
# runs the tests with Node's own runner. The tests start real
# `leasehold serve` processes: the binary comes from $LEASEHOLD_BIN, else
# ../../target/debug/leasehold (run `cargo build` first). Needs Node 20 or
# newer. Extra arguments go to `node --test`, e.g.
# `./run-tests.sh --test-name-pattern=session`.
set -euo pipefail
cd "$(dirname "$0")"

major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
    echo "run-tests.sh: Node $(node --version) is too old; the client needs Node 20 or newer" >&2
    exit 1
fi
echo "== npm ci"
npm ci --no-audit --no-fund --loglevel=error
echo "== tsc (the package, strict)"
npx tsc -p tsconfig.json
echo "== tsc (tests and the conformance driver)"
npx tsc -p tsconfig.test.json
echo "== node --test"
node --test --test-concurrency=1 "$@" build/test/
