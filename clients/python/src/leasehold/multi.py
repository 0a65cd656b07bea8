"""Several locks held together: :class:`LockSet` takes every lock of a list in
one multi-acquire, under one fencing token, and releases them together.

Unlike :class:`~leasehold.lock.Lock` there is no watchdog (as with the Rust
client's ``LockSet``): nothing renews the leases, so a set is for work that
fits in its ttl. Check :meth:`LockSet.valid_until` (or :meth:`remaining`)
before each action, and pass :attr:`token` with every write: once the ttl has
run out another owner may hold any of the locks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Optional

from . import _calls as calls
from ._core import default_owner, to_ms
from .errors import LeaseholdError, NotHeld, StaleToken
from .types import Leases, ReleasedMany

if TYPE_CHECKING:
    from .aio import AsyncClient
    from .client import Client

log = logging.getLogger("leasehold")


class _SetBase:
    """What :class:`LockSet` and :class:`AsyncLockSet` share: the request and
    the leases it answered."""

    def __init__(
        self,
        names: Sequence[str],
        *,
        ttl: float,
        wait: Optional[float],
        owner: Optional[str],
        lock_delay: Optional[float],
    ) -> None:
        # Checked here, as Lock checks its options: a mistake shows where the
        # set is made, not later at the `with`.
        self._names = calls.lock_names(names)
        self._ttl_ms = to_ms(ttl, "ttl")
        self._wait_ms = calls.seconds_to_ms(wait, "wait")
        self._lock_delay_ms = calls.seconds_to_ms(lock_delay, "lock_delay")
        self._owner = owner if owner is not None else default_owner()
        self._leases: Optional[Leases] = None

    @property
    def names(self) -> list[str]:
        return list(self._names)

    @property
    def owner(self) -> str:
        return self._owner

    @property
    def leases(self) -> Leases:
        """The grants of the multi-acquire, one per lock, in the order asked."""
        if self._leases is None:
            raise RuntimeError("the lock set is not acquired")
        return self._leases

    @property
    def token(self) -> int:
        """The fencing token of every lock of the set: send it with every write."""
        return self.leases.token

    def valid_until(self, margin: Optional[float] = None) -> float:
        """Until when (on ``time.monotonic()``) the cluster cannot have expired
        any lock of the set: see :meth:`Leases.valid_until`. Nothing renews
        the set, so this never moves."""
        return self.leases.valid_until(margin)

    def remaining(self, margin: Optional[float] = None) -> float:
        """Seconds left before :meth:`valid_until` (<= 0 once past it)."""
        return self.valid_until(margin) - time.monotonic()

    def _acquire_call(self) -> calls.Call[Leases]:
        if self._leases is not None:
            raise RuntimeError("the lock set is already acquired")
        return calls.acquire_many(
            self._names, self._owner, self._ttl_ms, self._wait_ms, None, self._lock_delay_ms
        )

    def _release_call(self) -> calls.Call[ReleasedMany]:
        return calls.release_many(self._names, self.token)

    def _release_refusal_expected(self, error: LeaseholdError) -> bool:
        """A release refused because the leases had run out meanwhile."""
        return isinstance(error, (NotHeld, StaleToken)) and self.remaining() <= 0

    def _release_failed(self, error: LeaseholdError, raised_in_block: bool) -> None:
        """Leaving the block: the leases' end is no surprise once their ttl
        has run out; another failure is raised, unless the block's own
        exception is already on its way out."""
        if self._release_refusal_expected(error):
            return
        if not raised_in_block:
            raise error
        log.warning("releasing %s after an exception failed: %s", self._names, error)

    def __repr__(self) -> str:
        token = self._leases.token if self._leases is not None else None
        return f"<{type(self).__name__} {self._names!r} owner={self._owner!r} token={token}>"


class LockSet(_SetBase):
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


class AsyncLockSet(_SetBase):
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
