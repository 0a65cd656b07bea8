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

import itertools
import logging
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Callable, Optional

from . import _calls as calls
from ._core import default_owner
from ._watchdog import Kept, LostReason, TaskWatchdog, ThreadWatchdog, Timing, options
from .errors import LeaseholdError, SessionNotFound
from .types import Lease, Leases, SessionDeleted, SessionView

if TYPE_CHECKING:
    from .aio import AsyncClient
    from .client import Client

log = logging.getLogger("leasehold")


def _ended(error: SessionNotFound) -> LostReason:
    return LostReason("revoked", error.message, error.code)


class _SessionBase(Kept):
    """What :class:`Session` and :class:`AsyncSession` share: the session's
    id, owner and sequence, and the requests made under it."""

    _ENDED_BY = (SessionNotFound,)
    _NOT_STARTED = "the session is not open"

    def __init__(
        self,
        owner: Optional[str],
        *,
        ttl: float,
        drift_margin: Optional[float],
        on_lost: Optional[Callable[[LostReason], object]],
    ) -> None:
        super().__init__(*options(ttl, drift_margin), on_lost)
        self._owner = owner if owner is not None else default_owner()
        self._id: Optional[int] = None
        self._seq = itertools.count(1)
        self._seq_mutex = threading.Lock()

    @property
    def id(self) -> int:
        """The session's id: the index of the log entry that created it."""
        if self._id is None:
            raise RuntimeError(self._NOT_STARTED)
        return self._id

    @property
    def owner(self) -> str:
        """The owner every lock under the session is taken as."""
        return self._owner

    def _next_seq(self) -> int:
        """The next number of the session's sequence (from any thread)."""
        with self._seq_mutex:
            return next(self._seq)

    def _subject(self) -> str:
        return f"session {self._id}"

    def _create_call(self) -> calls.Call[SessionView]:
        if self._id is not None:
            raise RuntimeError("the session is already open")
        return calls.create_session(self._owner, self._ttl_ms)

    def _opened(self, view: SessionView, started: float) -> tuple[Timing, float]:
        """The timing and first anchor of the session ``view`` answered."""
        self._id = view.session
        requested = self._ttl_ms / 1000
        timing = Timing(min(requested, view.ttl_ms / 1000), self._ttl_ms, self._margin)
        return timing, min(started, view.sent_at)

    def _lock_call(self, name: str, wait: Optional[float]) -> calls.Call[Lease]:
        wait_ms = calls.seconds_to_ms(wait, "wait")
        return calls.acquire(
            name, self._owner, None, wait_ms, session=self.id, seq=self._next_seq()
        )  # fmt: skip

    def _lock_many_call(self, names: Sequence[str], wait: Optional[float]) -> calls.Call[Leases]:
        wait_ms = calls.seconds_to_ms(wait, "wait")
        return calls.acquire_many(
            names, self._owner, None, wait_ms, session=self.id, seq=self._next_seq()
        )  # fmt: skip

    def _close_failed(self, error: LeaseholdError, raised_in_block: bool) -> None:
        """Leaving the block: a session already known lost is no surprise
        when the delete finds it gone; another failure is raised, unless the
        block's own exception is already on its way out."""
        if isinstance(error, SessionNotFound) and self.is_lost():
            return
        if not raised_in_block:
            raise error
        log.warning("deleting %s after an exception failed: %s", self._subject(), error)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._id} owner={self._owner!r} lost={self._lost_reason}>"


class Session(ThreadWatchdog, _SessionBase):
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
            self._fire(_ended(e))
            raise

    def lock_many(self, names: Sequence[str], wait: Optional[float] = None) -> Leases:
        """Acquires every lock of ``names`` under the session in one log
        entry, under one token, or none of them; as :meth:`Client.acquire_many`
        and :meth:`lock`."""
        try:
            return self._client._run(self._lock_many_call(names, wait))
        except SessionNotFound as e:
            self._fire(_ended(e))
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


class AsyncSession(TaskWatchdog, _SessionBase):
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
        _ = self.lost  # bound to this loop before the watchdog can set it
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
            await self._fire(_ended(e))
            raise

    async def lock_many(self, names: Sequence[str], wait: Optional[float] = None) -> Leases:
        """As :meth:`Session.lock_many`."""
        try:
            return await self._client._run(self._lock_many_call(names, wait))
        except SessionNotFound as e:
            await self._fire(_ended(e))
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
