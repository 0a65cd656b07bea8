# Generated from src/leasehold/_async/multi.py by scripts/generate_sync.py (unasync):
# do not edit. Edit the asyncio source and run that script instead.
"""The lock-set guard: :class:`~leasehold.multi.AsyncLockSet` is written in
``leasehold/_async/multi.py``, :class:`~leasehold.multi.LockSet` generated from
it into ``leasehold/_sync/multi.py`` (see :mod:`leasehold._async`).
Why a set has no watchdog is in :mod:`leasehold.multi`."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Optional

from leasehold._guards import LockSetBase
from leasehold.errors import LeaseholdError
from leasehold.types import ReleasedMany

if TYPE_CHECKING:
    from .client import Client


class LockSet(LockSetBase):
    """Locks held together through a client:
    ``with client.lock_many(["a", "b"], ttl=10) as locks`` (a
    :class:`~leasehold.multi.LockSet` of a :class:`~leasehold.Client`;
    ``async with`` for the :class:`~leasehold.multi.AsyncLockSet` of an
    :class:`~leasehold.AsyncClient`) acquires every lock on entry
    (``HeldByOther`` with ``conflicts``, ``WaitTimeout``, ... propagate) and
    releases them all on exit, in one log entry. No watchdog: see
    :mod:`leasehold.multi`."""

    def __init__(
        self,
        client: Client,
        names: Sequence[str],
        *,
        ttl: float = 10.0,
        wait: Optional[float] = None,
        owner: Optional[str] = None,
        lock_delay: Optional[float] = None,
    ) -> None:
        super().__init__(names, ttl=ttl, wait=wait, owner=owner, lock_delay=lock_delay)
        self._client = client

    def acquire(self) -> LockSet:
        """Acquires every lock of the set (waiting up to ``wait`` for all)."""
        self._leases = self._client._run(self._acquire_call())
        return self

    def release(self) -> ReleasedMany:
        """Releases every lock of the set. Raises the cluster's error
        (``StaleToken``/``NotHeld`` when the leases ran out) or
        ``Unavailable`` (they then run out after their ttl)."""
        return self._client._run(self._release_call())

    def __enter__(self) -> LockSet:
        return self.acquire()

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._leases is None:
            return
        try:
            self.release()
        except LeaseholdError as e:
            self._release_failed(e, exc_type is not None)
