#!/usr/bin/env bash
# Lint, type-check and test the Python client. Exits non-zero on any failure.
#
# Creates a virtualenv in $VENV (default clients/python/.venv) with $PYTHON
# (default python3, 3.9 or newer), installs the test environment from its
# lock, requirements-test.txt (the package's dependencies and [test] extras
# and the build backend, at exact versions, checked by hash; regenerate with
# .ci/lock-python-deps), then the package itself, editable and without
# dependencies, checks that the sync client and guards in src/leasehold/_sync
# are what scripts/generate_sync.py makes of their asyncio source in
# src/leasehold/_async, then runs ruff (lint and format check), mypy --strict
# and pytest. The tests start real `leasehold serve` processes: the
# binary comes from $LEASEHOLD_BIN, else ../../target/release/leasehold, else
# ../../target/debug/leasehold (run `cargo build` first). Extra arguments go
# to pytest, e.g. `./run-tests.sh -k lock -x`; `--venv-only` stops once the
# environment is installed (the conformance driver runs in it).
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

if [ ! -x "$VENV/bin/python" ]; then
    echo "== creating $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
fi
echo "== pip install -r requirements-test.txt, then -e ."
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install --quiet --require-hashes -r requirements-test.txt
# Everything it needs is in the lock, setuptools (the build backend) included:
# no build isolation, which would fetch an unpinned setuptools, and no deps.
"${pip[@]}" install --quiet --no-build-isolation --no-deps -e .
# The lock still satisfies pyproject.toml (a dependency added there without
# regenerating the lock shows here, not as an ImportError in a test).
"${pip[@]}" check
if [ "${1:-}" = "--venv-only" ]; then
    exit 0
fi

echo "== generated sync code is current"
"$VENV/bin/python" scripts/generate_sync.py --check
echo "== ruff check"
"$VENV/bin/ruff" check .
echo "== ruff format --check"
"$VENV/bin/ruff" format --check .
echo "== mypy --strict"
"$VENV/bin/mypy"
echo "== pytest"
"$VENV/bin/pytest" "$@"
