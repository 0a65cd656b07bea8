# Generated from src/leasehold/_async/lock.py by scripts/generate_sync.py (unasync):
# do not edit. Edit the asyncio source and run that script instead.
"""The lock guard: :class:`~leasehold.lock.AsyncLock` is written in
``leasehold/_async/lock.py``, :class:`~leasehold.lock.Lock` generated from
it into ``leasehold/_sync/lock.py`` (see :mod:`leasehold._async`).
What a held lock guarantees is in :mod:`leasehold.lock`."""

from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING, Callable, Optional

from leasehold._guards import LockBase, checked_renewal
from leasehold._watchdog import LostReason, ThreadWatchdog, Timing
from leasehold.errors import LeaseholdError
from leasehold.types import Lease, Released

if TYPE_CHECKING:
    from .client import Client


class Lock(ThreadWatchdog, LockBase):
    """A lock held through a client, kept by a watchdog that renews it every
    ``ttl / 3``: a :class:`~leasehold.lock.Lock` (from a
    :class:`~leasehold.Client`) has a watchdog thread, an
    :class:`~leasehold.lock.AsyncLock` (from an :class:`~leasehold.AsyncClient`)
    an asyncio task.

    Use it as a context manager (``with client.lock("x", ttl=10) as lease``,
    ``async with`` for an AsyncLock): entry acquires
    (``HeldByOther``/``WaitTimeout``/... propagate), exit stops the watchdog
    and releases. Pass :attr:`token` with every write and stop acting when
    :attr:`lost` (a :class:`threading.Event`; an AsyncLock's is an
    :class:`asyncio.Event`) is set, or check :meth:`is_lost` /
    :meth:`valid_until` before each action. ``on_lost(reason)`` is called
    once, from the watchdog, when it is set (an AsyncLock's may be a
    coroutine function). ``lock_delay`` (seconds) is the acquire's: should
    the watchdog fail and the lease expire, nobody gets the lock for that
    long after.
    """

    def __init__(
        self,
        client: Client,
        name: str,
        *,
        ttl: float = 10.0,
        wait: Optional[float] = None,
        owner: Optional[str] = None,
        drift_margin: Optional[float] = None,
        on_lost: Optional[Callable[[LostReason], object]] = None,
        lock_delay: Optional[float] = None,
    ) -> None:
        super().__init__(
            name,
            ttl=ttl,
            wait=wait,
            owner=owner,
            drift_margin=drift_margin,
            on_lost=on_lost,
            lock_delay=lock_delay,
        )
        self._client = client

    #: Held in shared mode (an :class:`AsyncReadLock`).
    _SHARED = False

    @property
    def _shared_owner(self) -> Optional[str]:
        """The owner a shared lease's renew and release name."""
        return self._owner if self._SHARED else None

    def acquire(self) -> Lock:
        """Acquires the lock (waiting in its queue up to ``wait``) and starts
        the watchdog. When the acquire took so long that less than a renewal
        interval is left before the safe deadline, renews once first."""
        if self._token is not None:
            raise RuntimeError("the lock is already acquired")
        started = time.monotonic()
        lease = self._grant()
        timing = self._granted(lease)
        anchor = min(started, lease.sent_at)
        if timing.deadline(anchor) < time.monotonic() + timing.interval:
            started = time.monotonic()
            renewed = self._client.renew(
                self._name, lease.token, self._ttl_ms / 1000, shared_owner=self._shared_owner
            )
            checked_renewal(lease, renewed)
            anchor = min(started, renewed.sent_at)
        self._token = lease.token
        self._start_watchdog(timing, anchor)
        return self

    def _grant(self) -> Lease:
        """The grant the guard keeps: an acquire of the lock."""
        return self._client._acquire_ms(
            self._name,
            self._owner,
            self._ttl_ms,
            self._wait_ms,
            lock_delay_ms=self._lock_delay_ms,
            shared=self._SHARED,
        )

    def release(self) -> Released:
        """Stops the watchdog, then releases the lock. Raises the cluster's
        error (``StaleToken``/``NotHeld`` when it was already lost) or
        ``Unavailable`` (the lease then runs out after its ttl)."""
        token = self.token
        self._stop_watchdog()
        return self._client.release(self._name, token, shared_owner=self._shared_owner)

    def _renewal(self, timing: Timing, deadline: float) -> Lease:
        return self._client._renew_ms(
            self._name, self.token, timing.ttl_ms, deadline, shared_owner=self._shared_owner
        )

    def __enter__(self) -> Lock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._token is None:
            return
        try:
            self.release()
        except LeaseholdError as e:
            self._release_failed(e, exc_type is not None)


class ReadLock(Lock):
    """A lock held in shared mode (a read lock): shared holders coexist, a
    writer excludes them all, and a waiting writer is not overtaken by later
    readers. Otherwise an :class:`AsyncLock` (the same watchdog, ``lost`` and
    safe deadline); a :class:`~leasehold.lock.ReadLock` from a sync client.
    Only a writer's token should fence writes (docs/fencing.md)."""

    _SHARED = True


class WriteLock(Lock):
    """A lock held in exclusive mode, as an :class:`AsyncLock` is: the
    writer's side of a read/write lock (a :class:`~leasehold.lock.WriteLock`
    from a sync client)."""
