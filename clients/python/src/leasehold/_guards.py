"""What each guard is, whatever its flavour: the state of a held lock
(:class:`LockBase`), of a session (:class:`SessionBase`) and of a lock set
(:class:`LockSetBase`), and the decisions taken on it. The guards themselves
(``Lock`` and ``AsyncLock``, ``Session`` and ``AsyncSession``, ``LockSet`` and
``AsyncLockSet``) only add the calls to the cluster, which the two flavours
make differently (awaited or not): those are written once, for asyncio, in
:mod:`leasehold._async`, and generated for the sync flavour."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Sequence
from typing import Callable, Optional, TypeVar

from . import _calls as calls
from ._core import default_owner, to_ms
from ._watchdog import Kept, LostReason, Renewed, Timing, options
from .errors import (
    ApiError,
    DecodeError,
    LeaseholdError,
    NoSemaphore,
    NotHeld,
    SessionNotFound,
    StaleToken,
)
from .types import Lease, Leases, Permits, ReleasedMany, SessionView, SqlFence, fence_sql

log = logging.getLogger("leasehold")

#: What a session holds: a lease of a lock, or permits of a semaphore.
Held = TypeVar("Held", Lease, Permits)


class LockBase(Kept):
    """State shared by :class:`Lock` and :class:`AsyncLock`."""

    _ENDED_BY: tuple[type[ApiError], ...] = (StaleToken, NotHeld)

    def __init__(
        self,
        name: str,
        *,
        ttl: float,
        wait: Optional[float],
        owner: Optional[str],
        drift_margin: Optional[float],
        on_lost: Optional[Callable[[LostReason], object]],
        lock_delay: Optional[float],
    ) -> None:
        super().__init__(*options(ttl, drift_margin), on_lost)
        self._name = name
        self._owner = owner if owner is not None else default_owner()
        self._wait_ms = 0 if wait is None else to_ms(wait, "wait")
        self._lock_delay_ms = 0 if lock_delay is None else to_ms(lock_delay, "lock_delay")
        self._token: Optional[int] = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def owner(self) -> str:
        return self._owner

    @property
    def token(self) -> int:
        """The fencing token of the grant: send it with every write."""
        if self._token is None:
            raise RuntimeError("the lock is not acquired")
        return self._token

    def fence_sql(
        self,
        column: str = "fence",
        *,
        param: str = "token",
        strict: bool = False,
        style: str = "pyformat",
    ) -> SqlFence:
        """SQL for a write that a newer holder's write makes fail, with this
        lock's token: ``.predicate`` (``fence <= %(token)s``) for ``WHERE``,
        ``.assignment`` (``fence = %(token)s``) for ``SET``, ``.params``
        (``{"token": 57}``). See :func:`leasehold.fence_sql`."""
        return fence_sql(self.token, column, param=param, strict=strict, style=style)

    def _subject(self) -> str:
        return f"lock {self._name} (token {self._token})"

    def _refusal(self, answer: Renewed) -> Optional[LostReason]:
        if isinstance(answer, Lease) and answer.token != self._token:
            return LostReason(
                "revoked", f"the renewal answered token {answer.token}", "stale_token"
            )
        return None

    def _granted(self, lease: Lease) -> Timing:
        requested = self._ttl_ms / 1000
        return Timing(min(requested, lease.ttl_ms / 1000), self._ttl_ms, self._margin)

    def _release_refusal_expected(self, error: LeaseholdError) -> bool:
        """A release refused because the lease had already ended."""
        return isinstance(error, (NotHeld, StaleToken)) and self.is_lost()

    def _release_failed(self, error: LeaseholdError, raised_in_block: bool) -> None:
        """Leaving the block: a lock already known lost is no surprise when
        the release is refused; another failure is raised, unless the
        block's own exception is already on its way out."""
        if self._release_refusal_expected(error):
            return
        if not raised_in_block:
            raise error
        log.warning("releasing %s after an exception failed: %s", self._name, error)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self._name!r} owner={self._owner!r} token={self._token} "
            f"lost={self._lost_reason}>"
        )


class SemaphoreBase(LockBase):
    """State shared by :class:`Semaphore` and :class:`AsyncSemaphore`: a
    lock guard's, with the semaphore's limit and the permits taken."""

    _ENDED_BY = (StaleToken, NotHeld, NoSemaphore)

    def __init__(
        self,
        name: str,
        *,
        limit: int,
        permits: int,
        ttl: float,
        wait: Optional[float],
        owner: Optional[str],
        drift_margin: Optional[float],
        on_lost: Optional[Callable[[LostReason], object]],
    ) -> None:
        super().__init__(
            name,
            ttl=ttl,
            wait=wait,
            owner=owner,
            drift_margin=drift_margin,
            on_lost=on_lost,
            lock_delay=None,
        )
        self._limit = limit
        self._permits = permits

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def permits(self) -> int:
        return self._permits

    def _subject(self) -> str:
        return f"semaphore {self._name} (token {self._token})"

    def _refusal(self, answer: Renewed) -> Optional[LostReason]:
        if isinstance(answer, Permits) and answer.token != self._token:
            return LostReason(
                "revoked", f"the renewal answered token {answer.token}", "stale_token"
            )
        return None

    def _granted_permits(self, held: Permits) -> Timing:
        requested = self._ttl_ms / 1000
        return Timing(min(requested, held.ttl_ms / 1000), self._ttl_ms, self._margin)


def checked_renewal(lease: Lease, renewed: Lease) -> None:
    if renewed.token != lease.token:
        raise DecodeError(f"renewal of token {lease.token} answered {renewed.token}")


def session_ended(error: SessionNotFound) -> LostReason:
    return LostReason("revoked", error.message, error.code)


class SessionBase(Kept):
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

    def _lock_call(
        self, name: str, wait: Optional[float], *, shared: bool = False
    ) -> calls.Call[Lease]:
        wait_ms = calls.seconds_to_ms(wait, "wait")
        return calls.acquire(
            name, self._owner, None, wait_ms, session=self.id, seq=self._next_seq(), shared=shared
        )  # fmt: skip

    def _permits_call(
        self, name: str, limit: int, permits: int, wait: Optional[float]
    ) -> calls.Call[Permits]:
        wait_ms = calls.seconds_to_ms(wait, "wait")
        return calls.acquire_permits(
            name, self._owner, limit, permits, None, wait_ms, session=self.id, seq=self._next_seq()
        )  # fmt: skip

    def _lock_many_call(self, names: Sequence[str], wait: Optional[float]) -> calls.Call[Leases]:
        wait_ms = calls.seconds_to_ms(wait, "wait")
        return calls.acquire_many(
            names, self._owner, None, wait_ms, session=self.id, seq=self._next_seq()
        )  # fmt: skip

    def _held_under_it(self, lease: Held) -> Held:
        """``lease`` (of a lock, or permits), granted under the session,
        anchored where the session is: an acquire restarts no deadline, so
        the lease lasts exactly as long as the session, whose last
        successful keepalive (or its create) anchors it, not the acquire's
        own send."""
        with self._mutex:
            anchor = self._anchor
        if anchor is None:
            raise RuntimeError(self._NOT_STARTED)
        return dataclasses.replace(lease, sent_at=anchor)

    def _all_held_under_it(self, leases: Leases) -> Leases:
        """``leases``, granted together under the session: each anchored
        where the session is, as :meth:`_held_under_it`."""
        grants = [self._held_under_it(lease) for lease in leases.grants]
        return dataclasses.replace(leases, grants=grants, sent_at=grants[0].sent_at)

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


class LockSetBase:
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
