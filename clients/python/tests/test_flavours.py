"""The sync client and guards are generated from the asyncio ones
(scripts/generate_sync.py; run-tests.sh checks that they are current): each
pair keeps one API, the async side awaited."""

from __future__ import annotations

import inspect
import re

import pytest

import leasehold

PAIRS = [
    (leasehold.Client, leasehold.AsyncClient),
    (leasehold.Lock, leasehold.AsyncLock),
    (leasehold.Session, leasehold.AsyncSession),
    (leasehold.LockSet, leasehold.AsyncLockSet),
]

#: Async methods whose sync twins are not the same name.
RENAMED = {"aclose": "close", "__aenter__": "__enter__", "__aexit__": "__exit__"}


def methods(cls: type) -> dict[str, object]:
    """Public methods and the context-manager protocol, by their sync name."""
    return {
        RENAMED.get(name, name): method
        for name, method in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") or name in RENAMED or name in RENAMED.values()
    }


def parameters(method: object, flavour: str) -> list[tuple[str, object, object, str]]:
    # Annotations are strings (from __future__ import annotations); an async
    # one names the Async twin of the sync one's type (AsyncLock, httpx.AsyncBaseTransport).
    signature = inspect.signature(method)
    unasync = (lambda a: re.sub(r"\bAsync(?=[A-Z])", "", a)) if flavour == "async" else str
    return [
        (p.name, p.kind, p.default, unasync(str(p.annotation)))
        for p in signature.parameters.values()
    ] + [("return", None, None, unasync(str(signature.return_annotation)))]


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=lambda cls: cls.__name__)
def test_each_sync_class_has_its_async_twins_methods_with_the_same_parameters(sync, async_):
    sync_methods, async_methods = methods(sync), methods(async_)
    assert sync_methods.keys() == async_methods.keys()
    for name, method in sync_methods.items():
        twin = async_methods[name]
        assert parameters(method, "sync") == parameters(twin, "async"), name
        assert not inspect.iscoroutinefunction(method), f"{sync.__name__}.{name} is async"
