"""Held locks: a lease kept alive by a watchdog, and the moment it is lost.

Timing (the same as the Rust client's ``Lock``): the cluster never expires a
lease before ``ttl`` of real time has passed since the entry that granted or
renewed it was committed, and that commit happens after the client sent the
request. So on this process's ``time.monotonic()`` the lease is certainly
still held until::

    anchor + ttl - drift_margin

where ``anchor`` is the instant the client started the call that produced
the last grant or renewal (no later than the send of its first attempt) and
``drift_margin`` (default ttl / 10) covers the rate difference between this
machine's clock and the leader's, and the watchdog's scheduling delays. That
instant is :meth:`Lock.valid_until`. The server's ``expires_in_ms`` plays no
part: it is counted from the commit, which the client cannot observe.

The watchdog renews every ``ttl / 3`` after the anchor. A failed renewal is
retried with a short back-off until the safe deadline; each attempt is cut
off at that deadline, so ``lost`` is set no later than the safe deadline even
when every node hangs. A renewal answered ``stale_token`` or ``not_held``
means the lease has ended on the cluster: ``lost`` is set at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from ._core import client_side, default_owner, to_ms
from .errors import DecodeError, InvalidArgument, LeaseholdError, NotHeld, StaleToken
from .types import DEFAULT_MARGIN_FRACTION, Lease, Released, SqlFence, fence_sql

if TYPE_CHECKING:
    from .aio import AsyncClient
    from .client import Client

log = logging.getLogger("leasehold")

#: First pause after a failed renewal; it doubles up to MAX_BACKOFF.
INITIAL_BACKOFF = 0.05
MAX_BACKOFF = 0.5
#: How often a waiting watchdog looks whether it was stopped.
_POLL = 0.05


@dataclass(frozen=True)
class LostReason:
    """Why a lock stopped protecting its holder.

    ``kind`` is ``"expired"``: the safe deadline passed without a successful
    renewal (no quorum, nodes unreachable or hung, this process paused); the
    lease may still be held on the cluster, but nothing guarantees it any
    more. Or ``"revoked"``: the cluster answered a renewal with ``code``
    ``stale_token`` or ``not_held``; the lease has ended and another owner
    may hold the lock.
    """

    kind: str
    message: str
    code: Optional[str] = None

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass(frozen=True)
class _Timing:
    ttl: float
    ttl_ms: int
    margin: float

    def deadline(self, anchor: float) -> float:
        return max(anchor, anchor + self.ttl - self.margin)

    @property
    def interval(self) -> float:
        return self.ttl / 3


def _options(ttl: float, drift_margin: Optional[float]) -> tuple[int, float]:
    ttl_ms = to_ms(ttl, "ttl")
    if ttl_ms <= 0:
        raise client_side(InvalidArgument(f"ttl {ttl!r} is not a positive number of seconds"))
    requested = ttl_ms / 1000
    margin = requested * DEFAULT_MARGIN_FRACTION if drift_margin is None else drift_margin
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin >= 0:
        raise client_side(InvalidArgument(f"drift margin {drift_margin!r} is not >= 0 seconds"))
    if margin > requested / 2:
        raise client_side(
            InvalidArgument(f"drift margin {margin} s is more than half the ttl {requested} s")
        )
    return ttl_ms, float(margin)


class _Base:
    """State shared by :class:`Lock` and :class:`AsyncLock`."""

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
        self._ttl_ms, self._margin = _options(ttl, drift_margin)
        self._name = name
        self._owner = owner if owner is not None else default_owner()
        self._wait_ms = 0 if wait is None else to_ms(wait, "wait")
        self._lock_delay_ms = 0 if lock_delay is None else to_ms(lock_delay, "lock_delay")
        self._on_lost = on_lost
        self._mutex = threading.Lock()
        self._token: Optional[int] = None
        self._timing: Optional[_Timing] = None
        self._valid_until: Optional[float] = None
        self._lost_reason: Optional[LostReason] = None
        self._released = False

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

    @property
    def ttl(self) -> float:
        """The lease's ttl in seconds (the shorter of asked and granted)."""
        return self._timing.ttl if self._timing is not None else self._ttl_ms / 1000

    @property
    def drift_margin(self) -> float:
        return self._margin

    def valid_until(self) -> float:
        """The safe deadline on ``time.monotonic()``: until then the cluster
        cannot have expired the lease (send time of the first attempt of the
        last successful grant or renewal + ttl - drift margin). It only moves
        forward, and stops once ``lost`` is set."""
        with self._mutex:
            if self._valid_until is None:
                raise RuntimeError("the lock is not acquired")
            return self._valid_until

    def remaining(self) -> float:
        """Seconds left before the safe deadline (<= 0 once past it)."""
        return self.valid_until() - time.monotonic()

    def is_lost(self) -> bool:
        """True once ``lost`` is set or the safe deadline has passed (the
        watchdog sets ``lost`` at that moment). False means the lease is safe
        at the time of the call."""
        with self._mutex:
            if self._lost_reason is not None:
                return True
            return self._valid_until is None or time.monotonic() >= self._valid_until

    @property
    def lost_reason(self) -> Optional[LostReason]:
        with self._mutex:
            return self._lost_reason

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

    def _granted(self, lease: Lease) -> _Timing:
        requested = self._ttl_ms / 1000
        return _Timing(min(requested, lease.ttl_ms / 1000), self._ttl_ms, self._margin)

    def _extend(self, deadline: float) -> None:
        with self._mutex:
            if self._lost_reason is None and self._valid_until is not None:
                self._valid_until = max(self._valid_until, deadline)

    def _mark_lost(self, reason: LostReason) -> bool:
        with self._mutex:
            if self._lost_reason is not None or self._released:
                return False
            self._lost_reason = reason
        log.warning("lock %s (token %s) lost: %s", self._name, self._token, reason)
        return True

    def _release_refusal_expected(self, error: LeaseholdError) -> bool:
        """A release refused because the lease had already ended."""
        return isinstance(error, (NotHeld, StaleToken)) and self.is_lost()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self._name!r} owner={self._owner!r} token={self._token} "
            f"lost={self._lost_reason}>"
        )


def _outcome_of_renewal(
    token: int, result: Union[Lease, BaseException], started: float, late: bool
) -> Union[float, LostReason, str]:
    """A new anchor, a reason to give up, or the error text to retry after."""
    if isinstance(result, Lease):
        if result.token != token:
            return LostReason(
                "revoked", f"the renewal answered token {result.token}", "stale_token"
            )  # fmt: skip
        if late:
            return "the renewal was answered after the safe deadline"
        return min(started, result.sent_at)
    if isinstance(result, (StaleToken, NotHeld)):
        return LostReason("revoked", result.message, result.code)
    return str(result) or type(result).__name__


class Lock(_Base):
    """A lock held through a :class:`~leasehold.Client`, kept by a watchdog
    thread that renews it every ``ttl / 3``.

    Use it as a context manager (``with client.lock("x", ttl=10) as lease``):
    entry acquires (``HeldByOther``/``WaitTimeout``/... propagate), exit
    stops the watchdog and releases. Pass :attr:`token` with every write and
    stop acting when :attr:`lost` (a :class:`threading.Event`) is set, or
    check :meth:`is_lost` / :meth:`valid_until` before each action.
    ``on_lost(reason)`` is called once, from the watchdog thread, when it is
    set. ``lock_delay`` (seconds) is the acquire's: should the watchdog fail
    and the lease expire, nobody gets the lock for that long after.
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
        #: Set when the lock can no longer be known to be held.
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def acquire(self) -> Lock:
        """Acquires the lock (waiting in its queue up to ``wait``) and starts
        the watchdog. When the acquire took so long that less than a renewal
        interval is left before the safe deadline, renews once first."""
        if self._token is not None:
            raise RuntimeError("the lock is already acquired")
        started = time.monotonic()
        lease = self._client._acquire_ms(
            self._name, self._owner, self._ttl_ms, self._wait_ms, lock_delay_ms=self._lock_delay_ms
        )
        timing = self._granted(lease)
        anchor = min(started, lease.sent_at)
        if timing.deadline(anchor) < time.monotonic() + timing.interval:
            started = time.monotonic()
            renewed = self._client.renew(self._name, lease.token, self._ttl_ms / 1000)
            if renewed.token != lease.token:
                raise DecodeError(f"renewal of token {lease.token} answered {renewed.token}")
            anchor = min(started, renewed.sent_at)
        with self._mutex:
            self._token, self._timing = lease.token, timing
            self._valid_until = timing.deadline(anchor)
        self._thread = threading.Thread(
            target=self._watchdog,
            args=(anchor,),
            name=f"leasehold-watchdog-{self._name}",
            daemon=True,
        )
        self._thread.start()
        return self

    def release(self) -> Released:
        """Stops the watchdog, then releases the lock. Raises the cluster's
        error (``StaleToken``/``NotHeld`` when it was already lost) or
        ``Unavailable`` (the lease then runs out after its ttl)."""
        token = self.token
        self._stop_watchdog()
        return self._client.release(self._name, token)

    def _stop_watchdog(self) -> None:
        with self._mutex:
            self._released = True
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

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
            if self._release_refusal_expected(e):
                return
            if exc_type is None:
                raise
            log.warning("releasing %s after an exception failed: %s", self._name, e)

    # --- the watchdog thread ---------------------------------------------------

    def _watchdog(self, anchor: float) -> None:
        try:
            self._keep(anchor)
        except BaseException as e:
            self._fire(LostReason("expired", f"the watchdog stopped: {e!r}"))
            raise

    def _keep(self, anchor: float) -> None:
        timing = self._timing
        assert timing is not None
        while True:
            pause = anchor + timing.interval - time.monotonic()
            if self._stop.wait(max(0.0, pause)):
                return
            outcome = self._renew_before(timing, timing.deadline(anchor))
            if outcome is None:
                return
            if isinstance(outcome, LostReason):
                self._fire(outcome)
                return
            anchor = outcome
            self._extend(timing.deadline(anchor))

    def _renew_before(self, timing: _Timing, deadline: float) -> Union[float, LostReason, None]:
        """Renews, retrying failures, until ``deadline``: the new anchor, the
        reason the lock is lost, or None when stopped."""
        token = self.token
        backoff = INITIAL_BACKOFF
        last_error = "no renewal attempt finished"
        while True:
            if time.monotonic() >= deadline:
                return LostReason("expired", f"no renewal before the safe deadline ({last_error})")
            started = time.monotonic()
            attempt = _Attempt(
                lambda: self._client._renew_ms(self._name, token, timing.ttl_ms, deadline)
            )
            while not attempt.done.wait(max(0.0, min(_POLL, deadline - time.monotonic()))):
                if self._stop.is_set():
                    return None
                if time.monotonic() >= deadline:
                    break
            if self._stop.is_set():
                return None
            late = time.monotonic() >= deadline
            if attempt.result is None:
                last_error = "the renewal was still unanswered at the safe deadline"
                continue
            outcome = _outcome_of_renewal(token, attempt.result, started, late)
            if not isinstance(outcome, str):
                return outcome
            last_error = outcome
            if late:
                continue
            log.debug("renewal of %s failed (%s); retrying", self._name, last_error)
            if self._stop.wait(max(0.0, min(backoff, deadline - time.monotonic()))):
                return None
            backoff = min(backoff * 2, MAX_BACKOFF)

    def _fire(self, reason: LostReason) -> None:
        if not self._mark_lost(reason):
            return
        self.lost.set()
        if self._on_lost is not None:
            try:
                self._on_lost(reason)
            except Exception:
                log.exception("on_lost callback of %s failed", self._name)


class _Attempt:
    """One renewal on a daemon thread of its own, so the watchdog can stop
    waiting for it at the safe deadline whatever the socket does."""

    def __init__(self, fn: Callable[[], Lease]) -> None:
        self.done = threading.Event()
        self.result: Union[Lease, BaseException, None] = None
        self._fn = fn
        threading.Thread(target=self._run, name="leasehold-renew", daemon=True).start()

    def _run(self) -> None:
        try:
            self.result = self._fn()
        except BaseException as e:
            self.result = e
        finally:
            self.done.set()


class AsyncLock(_Base):
    """The asyncio twin of :class:`Lock`: ``async with client.lock(...) as
    lease``. The watchdog is an asyncio task; :attr:`lost` is an
    :class:`asyncio.Event`. ``on_lost(reason)`` may be a coroutine function."""

    def __init__(
        self,
        client: AsyncClient,
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
        self._lost: Optional[asyncio.Event] = None
        self._task: Optional[asyncio.Task[None]] = None

    @property
    def lost(self) -> asyncio.Event:
        """Set when the lock can no longer be known to be held. (Made on
        first use, inside the running event loop.)"""
        if self._lost is None:
            self._lost = asyncio.Event()
        return self._lost

    async def acquire(self) -> AsyncLock:
        """As :meth:`Lock.acquire`."""
        _ = self.lost  # bound to this loop before the watchdog can set it
        if self._token is not None:
            raise RuntimeError("the lock is already acquired")
        started = time.monotonic()
        lease = await self._client._acquire_ms(
            self._name, self._owner, self._ttl_ms, self._wait_ms, lock_delay_ms=self._lock_delay_ms
        )
        timing = self._granted(lease)
        anchor = min(started, lease.sent_at)
        if timing.deadline(anchor) < time.monotonic() + timing.interval:
            started = time.monotonic()
            renewed = await self._client.renew(self._name, lease.token, self._ttl_ms / 1000)
            if renewed.token != lease.token:
                raise DecodeError(f"renewal of token {lease.token} answered {renewed.token}")
            anchor = min(started, renewed.sent_at)
        with self._mutex:
            self._token, self._timing = lease.token, timing
            self._valid_until = timing.deadline(anchor)
        self._task = asyncio.ensure_future(self._watchdog(anchor))
        return self

    async def release(self) -> Released:
        """As :meth:`Lock.release`."""
        token = self.token
        await self._stop_watchdog()
        return await self._client.release(self._name, token)

    async def _stop_watchdog(self) -> None:
        with self._mutex:
            self._released = True
        task, self._task = self._task, None
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __aenter__(self) -> AsyncLock:
        return await self.acquire()

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._token is None:
            return
        try:
            await self.release()
        except LeaseholdError as e:
            if self._release_refusal_expected(e):
                return
            if exc_type is None:
                raise
            log.warning("releasing %s after an exception failed: %s", self._name, e)

    async def _watchdog(self, anchor: float) -> None:
        try:
            await self._keep(anchor)
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            await self._fire(LostReason("expired", f"the watchdog stopped: {e!r}"))
            raise

    async def _keep(self, anchor: float) -> None:
        timing = self._timing
        assert timing is not None
        while True:
            await asyncio.sleep(max(0.0, anchor + timing.interval - time.monotonic()))
            outcome = await self._renew_before(timing, timing.deadline(anchor))
            if isinstance(outcome, LostReason):
                await self._fire(outcome)
                return
            anchor = outcome
            self._extend(timing.deadline(anchor))

    async def _renew_before(self, timing: _Timing, deadline: float) -> Union[float, LostReason]:
        token = self.token
        backoff = INITIAL_BACKOFF
        last_error = "no renewal attempt finished"
        while True:
            if time.monotonic() >= deadline:
                return LostReason("expired", f"no renewal before the safe deadline ({last_error})")
            started = time.monotonic()
            result: Union[Lease, BaseException]
            try:
                result = await asyncio.wait_for(
                    self._client._renew_ms(self._name, token, timing.ttl_ms, deadline),
                    timeout=max(0.0, deadline - time.monotonic()),
                )
            except asyncio.TimeoutError:
                last_error = "the renewal was still unanswered at the safe deadline"
                continue
            except Exception as e:
                result = e
            late = time.monotonic() >= deadline
            outcome = _outcome_of_renewal(token, result, started, late)
            if not isinstance(outcome, str):
                return outcome
            last_error = outcome
            if late:
                continue
            log.debug("renewal of %s failed (%s); retrying", self._name, last_error)
            await asyncio.sleep(max(0.0, min(backoff, deadline - time.monotonic())))
            backoff = min(backoff * 2, MAX_BACKOFF)

    async def _fire(self, reason: LostReason) -> None:
        if not self._mark_lost(reason):
            return
        self.lost.set()
        if self._on_lost is not None:
            try:
                result: Any = self._on_lost(reason)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("on_lost callback of %s failed", self._name)
