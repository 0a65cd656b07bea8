"""Several locks held together: :class:`LockSet` takes every lock of a list in
one multi-acquire, under one fencing token, and releases them together.

Unlike :class:`~leasehold.lock.Lock` there is no watchdog (as with the Rust
client's ``LockSet``): nothing renews the leases, so a set is for work that
fits in its ttl. Check :meth:`LockSet.valid_until` (or :meth:`remaining`)
before each action, and pass :attr:`token` with every write: once the ttl has
run out another owner may hold any of the locks.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Optional

from ._guards import LockSetBase
from .errors import LeaseholdError
from .types import ReleasedMany

if TYPE_CHECKING:
    from .aio import AsyncClient
    from .client import Client


class LockSet(LockSetBase):
    """Locks held together through a :class:`~leasehold.Client`:
    ``with client.lock_many(["a", "b"], ttl=10) as locks`` acquires every
    lock on entry (``HeldByOther`` with ``conflicts``, ``WaitTimeout``, ...
    propagate) and releases them all on exit, in one log entry. No watchdog:
    see the module's documentation."""

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


class AsyncLockSet(LockSetBase):
    """The asyncio twin of :class:`LockSet`:
    ``async with client.lock_many(["a", "b"], ttl=10) as locks``."""

    def __init__(
        self,
        client: AsyncClient,
        names: Sequence[str],
        *,
        ttl: float = 10.0,
        wait: Optional[float] = None,
        owner: Optional[str] = None,
        lock_delay: Optional[float] = None,
    ) -> None:
        super().__init__(names, ttl=ttl, wait=wait, owner=owner, lock_delay=lock_delay)
        self._client = client

    async def acquire(self) -> AsyncLockSet:
        """As :meth:`LockSet.acquire`."""
        self._leases = await self._client._run(self._acquire_call())
        return self

    async def release(self) -> ReleasedMany:
        """As :meth:`LockSet.release`."""
        return await self._client._run(self._release_call())

    async def __aenter__(self) -> AsyncLockSet:
        return await self.acquire()

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._leases is None:
            return
        try:
            await self.release()
        except LeaseholdError as e:
            self._release_failed(e, exc_type is not None)
