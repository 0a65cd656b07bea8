"""Generates the sync flavour of the Python client from its asyncio source.

Every module of ``src/leasehold/_async`` but ``__init__.py`` becomes its
namesake in ``src/leasehold/_sync``: unasync rewrites the tokens (``async
def`` to ``def``, ``await`` dropped, ``async with`` to ``with``,
``__aenter__`` to ``__enter__``, ... and the names of ``REPLACEMENTS``), then
ruff formats the result (a dropped ``await`` can make a wrapped call fit on
one line, which ruff format would otherwise flag). The output is committed,
so that installing from git needs no build step::

    python scripts/generate_sync.py          # rewrites src/leasehold/_sync
    python scripts/generate_sync.py --check  # fails, with a diff, unless it is current

run-tests.sh runs ``--check``. unasync leaves docstrings and comments alone:
the asyncio source words them for both flavours.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import unasync

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "leasehold" / "_async"
TARGET = ROOT / "src" / "leasehold" / "_sync"

#: The names unasync does not know, asyncio flavour to sync flavour: each is
#: replaced wherever it stands as a name in the code.
REPLACEMENTS = {
    # httpx's clients and leasehold's, whose names follow httpx's.
    "AsyncClient": "Client",
    "AsyncBaseTransport": "BaseTransport",
    "aclose": "close",
    # The guards.
    "AsyncLock": "Lock",
    "AsyncReadLock": "ReadLock",
    "AsyncWriteLock": "WriteLock",
    "AsyncSemaphore": "Semaphore",
    "AsyncLockSet": "LockSet",
    "AsyncSession": "Session",
    "AsyncLeadership": "Leadership",
    "AsyncElection": "Election",
    "AsyncWatch": "Watch",
    # leasehold._watchdog: a watchdog on an asyncio task, a watchdog thread.
    "TaskWatchdog": "ThreadWatchdog",
    # leasehold._core: the retry loop's pause.
    "asleep": "sleep",
    # httpx's streamed body, read chunk by chunk.
    "aiter_bytes": "iter_bytes",
    # ... or line by line (event streams).
    "aiter_lines": "iter_lines",
    "aread": "read",
}

HEADER = (
    "# Generated from src/leasehold/_async/{name} by scripts/generate_sync.py (unasync):\n"
    "# do not edit. Edit the asyncio source and run that script instead.\n"
)


def sources() -> list[Path]:
    return sorted(p for p in SOURCE.glob("*.py") if p.name != "__init__.py")


def generate() -> dict[str, str]:
    """The text of every generated module, by file name."""
    with tempfile.TemporaryDirectory() as out:
        # unasync writes next to its input, swapping fromdir for todir in the path.
        rule = unasync.Rule(f"{SOURCE}{os.sep}", f"{out}{os.sep}", REPLACEMENTS)
        unasync.unasync_files([str(p) for p in sources()], [rule])
        return {
            p.name: ruff_format(HEADER.format(name=p.name) + (Path(out) / p.name).read_text(), p)
            for p in sources()
        }


def ruff_format(text: str, source: Path) -> str:
    # Formatted as the file it becomes, so ruff applies this project's settings.
    target = TARGET / source.name
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(target), "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if formatted.returncode != 0:
        sys.exit(f"generate_sync: ruff format of {target.name} failed:\n{formatted.stderr}")
    return formatted.stdout


def stale() -> list[Path]:
    """Modules in _sync whose source is gone."""
    names = {p.name for p in sources()}
    return [p for p in TARGET.glob("*.py") if p.name != "__init__.py" and p.name not in names]


def write(generated: dict[str, str]) -> None:
    for name, text in generated.items():
        path = TARGET / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"generate_sync: wrote {path.relative_to(ROOT)}")
    for path in stale():
        path.unlink()
        print(f"generate_sync: removed {path.relative_to(ROOT)}")


def check(generated: dict[str, str]) -> bool:
    current = True
    for name, text in generated.items():
        path = TARGET / name
        existing = path.read_text() if path.exists() else ""
        if existing != text:
            current = False
            rel = str(path.relative_to(ROOT))
            sys.stdout.writelines(
                difflib.unified_diff(
                    existing.splitlines(keepends=True),
                    text.splitlines(keepends=True),
                    f"{rel} (as it is)",
                    f"{rel} (as generated)",
                )
            )
    for path in stale():
        current = False
        print(f"generate_sync: {path.relative_to(ROOT)} has no source in _async")
    return current


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail unless _sync is current")
    args = parser.parse_args()
    generated = generate()
    if not args.check:
        write(generated)
        return 0
    if check(generated):
        print("generate_sync: src/leasehold/_sync is what src/leasehold/_async generates")
        return 0
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).resolve()))}"
    print(f"generate_sync: src/leasehold/_sync is out of date; regenerate it with:\n  {command}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
