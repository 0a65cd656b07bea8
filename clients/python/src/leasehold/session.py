"""Sessions: any number of locks kept alive by one session, whose watchdog
sends one keepalive every ``ttl / 3`` whatever it holds, and whose one
``lost`` speaks for all of them (the Rust client's ``Session``).

The timing is the watchdog's, shared with :class:`~leasehold.Lock` (see
:mod:`leasehold._watchdog`): the session, and so every lock under it, is
safe until the start of the last successful keepalive (or of the create) +
ttl - drift margin, :meth:`Session.valid_until`. A lock acquired under the
session later, even after a long wait in its queue, is safe exactly as long
as the session: the cluster ends it only with the session. So the deadline
of a lock under a session is the session's, never its grant's
(:meth:`Lease.valid_until` of such a grant does not apply). A keepalive (or
an acquire) answered ``session_not_found`` means the session has ended and
its locks are gone: ``lost`` is set at once.

Every acquire and keepalive of a session carries the next number of the
session's sequence (``seq``: 1, 2, 3, ...), the same on each retry of one
call: the cluster answers a retry it has already applied from the session's
memory, for the session's whole life, not only while its request id is
remembered.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Callable, Optional

from ._guards import SessionBase, session_ended
from ._watchdog import LostReason, TaskWatchdog, ThreadWatchdog, Timing
from .errors import LeaseholdError, SessionNotFound
from .types import Lease, Leases, SessionDeleted, SessionView

if TYPE_CHECKING:
    from .aio import AsyncClient
    from .client import Client


class Session(ThreadWatchdog, SessionBase):
    """A session of a :class:`~leasehold.Client`, kept alive by a watchdog
    thread, under which locks are taken with :meth:`lock` and
    :meth:`lock_many`.

    ``with client.session("batch-7", ttl=10) as session`` creates it on
    entry and deletes it on exit, which releases every lock under it in one
    log entry. Stop acting under any of its locks when :attr:`lost` (a
    :class:`threading.Event`) is set, or check :meth:`is_lost` /
    :meth:`valid_until` before each action; pass each lock's token with
    every write. ``on_lost(reason)`` is called once, from the watchdog
    thread. Should the delete fail, the session (and its locks) runs out
    after its ttl.
    """

    def __init__(
        self,
        client: Client,
        owner: Optional[str] = None,
        *,
        ttl: float = 10.0,
        drift_margin: Optional[float] = None,
        on_lost: Optional[Callable[[LostReason], object]] = None,
    ) -> None:
        super().__init__(owner, ttl=ttl, drift_margin=drift_margin, on_lost=on_lost)
        self._client = client

    def open(self) -> Session:
        """Creates the session and starts its watchdog. ``Full`` at the
        cluster's session limit."""
        call = self._create_call()
        started = time.monotonic()
        view = self._client._run(call)
        self._start_watchdog(*self._opened(view, started))
        return self

    def lock(self, name: str, wait: Optional[float] = None) -> Lease:
        """Acquires ``name`` under the session, waiting in its queue up to
        ``wait`` seconds: the lock lives as long as the session (its safe
        deadline is :meth:`valid_until`). Errors as :meth:`Client.acquire`;
        ``SessionNotFound`` once the session has ended, which sets
        :attr:`lost`. Release it early with :meth:`Client.release`, or let
        :meth:`close` release it."""
        try:
            return self._client._run(self._lock_call(name, wait))
        except SessionNotFound as e:
            self._fire(session_ended(e))
            raise

    def lock_many(self, names: Sequence[str], wait: Optional[float] = None) -> Leases:
        """Acquires every lock of ``names`` under the session in one log
        entry, under one token, or none of them; as :meth:`Client.acquire_many`
        and :meth:`lock`."""
        try:
            return self._client._run(self._lock_many_call(names, wait))
        except SessionNotFound as e:
            self._fire(session_ended(e))
            raise

    def close(self) -> SessionDeleted:
        """Stops the watchdog and deletes the session, releasing every lock
        under it (each handed to its first waiter). Raises the cluster's
        error (``SessionNotFound`` when it had already ended) or
        ``Unavailable`` (the session then runs out after its ttl)."""
        session = self.id
        self._stop_watchdog()
        return self._client.delete_session(session)

    def _renewal(self, timing: Timing, deadline: float) -> SessionView:
        return self._client._keepalive_until(self.id, self._next_seq(), deadline)

    def __enter__(self) -> Session:
        return self.open()

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._id is None:
            return
        try:
            self.close()
        except LeaseholdError as e:
            self._close_failed(e, exc_type is not None)


class AsyncSession(TaskWatchdog, SessionBase):
    """The asyncio twin of :class:`Session`: ``async with
    client.session("batch-7", ttl=10) as session``. The watchdog is an
    asyncio task; :attr:`lost` is an :class:`asyncio.Event`; ``on_lost`` may
    be a coroutine function."""

    def __init__(
        self,
        client: AsyncClient,
        owner: Optional[str] = None,
        *,
        ttl: float = 10.0,
        drift_margin: Optional[float] = None,
        on_lost: Optional[Callable[[LostReason], object]] = None,
    ) -> None:
        super().__init__(owner, ttl=ttl, drift_margin=drift_margin, on_lost=on_lost)
        self._client = client

    async def open(self) -> AsyncSession:
        """As :meth:`Session.open`."""
        call = self._create_call()
        started = time.monotonic()
        view = await self._client._run(call)
        self._start_watchdog(*self._opened(view, started))
        return self

    async def lock(self, name: str, wait: Optional[float] = None) -> Lease:
        """As :meth:`Session.lock`."""
        try:
            return await self._client._run(self._lock_call(name, wait))
        except SessionNotFound as e:
            await self._fire(session_ended(e))
            raise

    async def lock_many(self, names: Sequence[str], wait: Optional[float] = None) -> Leases:
        """As :meth:`Session.lock_many`."""
        try:
            return await self._client._run(self._lock_many_call(names, wait))
        except SessionNotFound as e:
            await self._fire(session_ended(e))
            raise

    async def close(self) -> SessionDeleted:
        """As :meth:`Session.close`."""
        session = self.id
        await self._stop_watchdog()
        return await self._client.delete_session(session)

    async def _renewal(self, timing: Timing, deadline: float) -> SessionView:
        return await self._client._keepalive_until(self.id, self._next_seq(), deadline)

    async def __aenter__(self) -> AsyncSession:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._id is None:
            return
        try:
            await self.close()
        except LeaseholdError as e:
            self._close_failed(e, exc_type is not None)
