"""The session guard: :class:`~leasehold.session.AsyncSession` is written in
``leasehold/_async/session.py``, :class:`~leasehold.session.Session` generated from
it into ``leasehold/_sync/session.py`` (see :mod:`leasehold._async`).
What a session guarantees is in :mod:`leasehold.session`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Callable, Optional, TypeVar

from leasehold import _calls as calls
from leasehold._guards import SessionBase, session_ended
from leasehold._watchdog import LostReason, TaskWatchdog, Timing
from leasehold.errors import LeaseholdError, SessionNotFound
from leasehold.types import Lease, Leases, Permits, SessionDeleted, SessionView

if TYPE_CHECKING:
    from .client import AsyncClient

Answer = TypeVar("Answer")


class AsyncSession(TaskWatchdog, SessionBase):
    """A session of a client, kept alive by a watchdog, under which locks are
    taken with :meth:`lock` and :meth:`lock_many`, read locks with
    :meth:`read_lock` and semaphore permits with :meth:`acquire_permits`: a
    :class:`~leasehold.session.Session` (from a :class:`~leasehold.Client`)
    has a watchdog thread, an :class:`~leasehold.session.AsyncSession` (from
    an :class:`~leasehold.AsyncClient`) an asyncio task.

    ``with client.session("batch-7", ttl=10) as session`` (``async with``
    for an AsyncSession) creates it on entry and deletes it on exit, which
    releases every lock under it in one log entry. Stop acting under any of
    its locks when :attr:`lost` (a :class:`threading.Event`; an
    AsyncSession's is an :class:`asyncio.Event`) is set, or check
    :meth:`is_lost` / :meth:`valid_until` before each action; pass each
    lock's token with every write. ``on_lost(reason)`` is called once, from
    the watchdog (an AsyncSession's may be a coroutine function). Should the
    delete fail, the session (and its locks) runs out after its ttl.
    """

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
        """Creates the session and starts its watchdog. ``Full`` at the
        cluster's session limit."""
        call = self._create_call()
        started = time.monotonic()
        view = await self._client._run(call)
        self._start_watchdog(*self._opened(view, started))
        return self

    async def lock(self, name: str, wait: Optional[float] = None) -> Lease:
        """Acquires ``name`` under the session, waiting in its queue up to
        ``wait`` seconds: the lock lives as long as the session (its safe
        deadline is :meth:`valid_until`), and the lease answered is anchored
        where the session is, not at the acquire. Errors as :meth:`Client.acquire`;
        ``SessionNotFound`` once the session has ended, which sets
        :attr:`lost`. Release it early with :meth:`Client.release`, or let
        :meth:`close` release it. This is also the writer's side of a
        read/write lock (see :meth:`read_lock`)."""
        return self._held_under_it(await self._under_it(self._lock_call(name, wait)))

    async def read_lock(self, name: str, wait: Optional[float] = None) -> Lease:
        """Acquires ``name`` in shared mode (a read lock) under the session,
        as :meth:`lock` takes it exclusively: readers hold it together, a
        writer excludes them. Release it early with :meth:`Client.release`
        and ``shared_owner`` set to :attr:`owner`."""
        call = self._lock_call(name, wait, shared=True)
        return self._held_under_it(await self._under_it(call))

    async def acquire_permits(
        self, name: str, limit: int, *, permits: int = 1, wait: Optional[float] = None
    ) -> Permits:
        """Takes ``permits`` of semaphore ``name`` (all or none) under the
        session, waiting in its queue up to ``wait`` seconds: they return
        when the session ends, and are anchored where the session is, as
        :meth:`lock`'s lease. Errors as :meth:`Client.acquire_permits`, and
        as :meth:`lock`. Return them early with :meth:`Client.release_permits`."""
        call = self._permits_call(name, limit, permits, wait)
        return self._held_under_it(await self._under_it(call))

    async def lock_many(self, names: Sequence[str], wait: Optional[float] = None) -> Leases:
        """Acquires every lock of ``names`` under the session in one log
        entry, under one token, or none of them; as :meth:`Client.acquire_many`
        and :meth:`lock`."""
        return self._all_held_under_it(await self._under_it(self._lock_many_call(names, wait)))

    async def _under_it(self, call: calls.Call[Answer]) -> Answer:
        """Runs ``call``, a request made under the session: a
        ``SessionNotFound`` answer means the session has ended, which sets
        :attr:`lost` before it is raised."""
        try:
            return await self._client._run(call)
        except SessionNotFound as e:
            await self._fire(session_ended(e))
            raise

    async def close(self) -> SessionDeleted:
        """Stops the watchdog and deletes the session, releasing every lock
        under it (each handed to its first waiter). Raises the cluster's
        error (``SessionNotFound`` when it had already ended) or
        ``Unavailable`` (the session then runs out after its ttl)."""
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
