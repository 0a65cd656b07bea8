"""The watchdog shared by :class:`~leasehold.Lock` (which renews one lease)
and :class:`~leasehold.Session` (which keeps one session, and so all its
locks, alive): what it renews differs, the timing and the ``lost`` signal do
not (as ``watchdog.rs`` in the Rust client).

Timing: the cluster never expires a lease or a session before ``ttl`` of
real time has passed since the entry that granted or renewed it was
committed, and that commit happens after the client sent the request. So on
this process's ``time.monotonic()`` it is certainly still alive until::

    anchor + ttl - drift_margin

where ``anchor`` is the instant the client started the call that produced
the last grant or renewal (no later than the send of its first attempt) and
``drift_margin`` (default ttl / 10) covers the rate difference between this
machine's clock and the leader's, and the watchdog's scheduling delays. That
instant is ``valid_until()``. The server's ``expires_in_ms`` plays no part:
it is counted from the commit, which the client cannot observe.

The watchdog renews every ``ttl / 3`` after the anchor. A failed renewal is
retried with a short back-off until the safe deadline; each attempt is cut
off at that deadline, so ``lost`` is set no later than the safe deadline even
when every node hangs. A renewal the cluster refuses because the lease or
session has ended sets ``lost`` at once.

Between a renewal going wrong and the safe deadline the holder is *at risk*
(``is_at_risk()``): still safe, but the watchdog cannot say it will stay so.
That is the case once an attempt of the due renewal has failed, or when the
due renewal is still unanswered half an interval after it was due (every
node hangs, so no attempt fails), until a renewal succeeds.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from ._core import client_side, to_ms
from .errors import ApiError, InvalidArgument
from .types import DEFAULT_MARGIN_FRACTION, Lease, Permits, SessionView

log = logging.getLogger("leasehold")

#: First pause after a failed renewal; it doubles up to MAX_BACKOFF.
INITIAL_BACKOFF = 0.05
MAX_BACKOFF = 0.5
#: How often a waiting watchdog looks whether it was stopped.
_POLL = 0.05

#: What a renewal answers: each carries the send time that anchors it.
Renewed = Union[Lease, SessionView, Permits]


@dataclass(frozen=True)
class LostReason:
    """Why a lock (or a session, and with it all its locks) stopped
    protecting its holder.

    ``kind`` is ``"expired"``: the safe deadline passed without a successful
    renewal (no quorum, nodes unreachable or hung, this process paused); the
    lease may still be held on the cluster, but nothing guarantees it any
    more. Or ``"revoked"``: the cluster answered a renewal with ``code``
    ``stale_token`` or ``not_held`` (a lock), or ``session_not_found`` (a
    session); it has ended and another owner may hold the lock.
    """

    kind: str
    message: str
    code: Optional[str] = None

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass(frozen=True)
class Timing:
    ttl: float
    ttl_ms: int
    margin: float

    def deadline(self, anchor: float) -> float:
        return max(anchor, anchor + self.ttl - self.margin)

    @property
    def interval(self) -> float:
        return self.ttl / 3

    def overdue(self, anchor: float) -> float:
        """When a renewal due at ``anchor + interval`` that has not succeeded
        yet puts the holder at risk though no attempt failed: half an
        interval late, ``anchor + ttl / 2``, never after the safe deadline
        (the margin is at most ``ttl / 2``)."""
        return anchor + self.interval * 1.5


def options(ttl: float, drift_margin: Optional[float]) -> tuple[int, float]:
    """The ttl in whole ms and the drift margin in seconds, checked."""
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


class Kept:
    """Something a watchdog keeps alive: its safe deadline and whether it is
    lost. Subclasses say what it is (:meth:`_subject`), which errors mean the
    cluster ended it (``_ENDED_BY``) and how to renew it (the flavour's
    ``_renewal``)."""

    #: Errors of a renewal that mean the cluster has ended it.
    _ENDED_BY: tuple[type[ApiError], ...] = ()
    #: Why there is no deadline yet.
    _NOT_STARTED = "the lock is not acquired"

    def __init__(
        self, ttl_ms: int, margin: float, on_lost: Optional[Callable[[LostReason], object]]
    ) -> None:
        self._ttl_ms, self._margin = ttl_ms, margin
        self._on_lost = on_lost
        self._mutex = threading.Lock()
        self._timing: Optional[Timing] = None
        #: The start of the call of the last successful grant or renewal.
        self._anchor: Optional[float] = None
        self._lost_reason: Optional[LostReason] = None
        #: An attempt of the due renewal failed, and none succeeded since.
        self._failing = False
        self._released = False

    @property
    def ttl(self) -> float:
        """The ttl in seconds (for a lock, the shorter of asked and granted)."""
        return self._timing.ttl if self._timing is not None else self._ttl_ms / 1000

    @property
    def drift_margin(self) -> float:
        return self._margin

    def valid_until(self) -> float:
        """The safe deadline on ``time.monotonic()``: until then the cluster
        cannot have ended it (start of the call of the last successful grant
        or renewal + ttl - drift margin). It only moves forward, and stops
        once ``lost`` is set."""
        with self._mutex:
            valid_until = self._deadline()
        if valid_until is None:
            raise RuntimeError(self._NOT_STARTED)
        return valid_until

    def remaining(self) -> float:
        """Seconds left before the safe deadline (<= 0 once past it)."""
        return self.valid_until() - time.monotonic()

    def is_lost(self) -> bool:
        """True once ``lost`` is set or the safe deadline has passed (the
        watchdog sets ``lost`` at that moment). False means it is safe at
        the time of the call."""
        with self._mutex:
            if self._lost_reason is not None:
                return True
            valid_until = self._deadline()
            return valid_until is None or time.monotonic() >= valid_until

    def is_at_risk(self) -> bool:
        """True while it is still safe but its renewal is going wrong: an
        attempt failed, or the due renewal is half an interval late, and no
        renewal has succeeded since. False once lost (see :meth:`is_lost`)
        and again after a successful renewal: time to finish or checkpoint
        the work before ``lost`` is set."""
        with self._mutex:
            if self._lost_reason is not None or self._timing is None or self._anchor is None:
                return False
            now = time.monotonic()
            return now < self._timing.deadline(self._anchor) and (
                self._failing or now >= self._timing.overdue(self._anchor)
            )

    @property
    def lost_reason(self) -> Optional[LostReason]:
        with self._mutex:
            return self._lost_reason

    def _subject(self) -> str:
        """What the logs call it."""
        raise NotImplementedError

    def _refusal(self, answer: Renewed) -> Optional[LostReason]:
        """A successful answer that still says it has ended."""
        return None

    def _deadline(self) -> Optional[float]:
        """The safe deadline of the current anchor, None before ``_begin``;
        called with ``_mutex`` held."""
        if self._timing is None or self._anchor is None:
            return None
        return self._timing.deadline(self._anchor)

    def _begin(self, timing: Timing, anchor: float) -> None:
        with self._mutex:
            self._timing = timing
            self._anchor = anchor

    def _extend(self, anchor: float) -> None:
        """A renewal anchored at ``anchor`` succeeded."""
        with self._mutex:
            if self._lost_reason is None and self._timing is not None and self._anchor is not None:
                self._anchor = max(self._anchor, anchor)
                self._failing = False

    def _renewal_failed(self) -> None:
        """An attempt of the due renewal failed; it is retried."""
        with self._mutex:
            self._failing = True

    def _mark_lost(self, reason: LostReason) -> bool:
        with self._mutex:
            if self._lost_reason is not None or self._released:
                return False
            self._lost_reason = reason
        log.warning("%s lost: %s", self._subject(), reason)
        return True

    def _mark_released(self) -> None:
        """From now on nothing is lost: the holder let go on purpose."""
        with self._mutex:
            self._released = True

    def _judge(
        self, result: Union[Renewed, BaseException], started: float, late: bool
    ) -> Union[float, LostReason, str]:
        """A new anchor, a reason to give up, or the error text to retry after."""
        if isinstance(result, self._ENDED_BY):
            return LostReason("revoked", result.message, result.code)
        if isinstance(result, BaseException):
            return str(result) or type(result).__name__
        refusal = self._refusal(result)
        if refusal is not None:
            return refusal
        if late:
            return "the renewal was answered after the safe deadline"
        return min(started, result.sent_at)


class ThreadWatchdog(Kept):
    """A :class:`Kept` renewed by a daemon thread; :attr:`lost` is a
    :class:`threading.Event` and ``on_lost`` is called from that thread."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Set when it can no longer be known to be held.
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _renewal(self, timing: Timing, deadline: float) -> Renewed:
        """Sends one renewal, giving up at ``deadline``."""
        raise NotImplementedError

    def _start_watchdog(self, timing: Timing, anchor: float) -> None:
        self._begin(timing, anchor)
        self._thread = threading.Thread(
            target=self._watchdog,
            args=(anchor,),
            name=f"leasehold-watchdog-{self._subject()}",
            daemon=True,
        )
        self._thread.start()

    def _stop_watchdog(self) -> None:
        self._mark_released()
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

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
            self._extend(anchor)

    def _renew_before(self, timing: Timing, deadline: float) -> Union[float, LostReason, None]:
        """Renews, retrying failures, until ``deadline``: the new anchor, the
        reason it is lost, or None when stopped."""
        backoff = INITIAL_BACKOFF
        last_error = "no renewal attempt finished"
        while True:
            if time.monotonic() >= deadline:
                return LostReason("expired", f"no renewal before the safe deadline ({last_error})")
            started = time.monotonic()
            attempt = _Attempt(lambda: self._renewal(timing, deadline))
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
            outcome = self._judge(attempt.result, started, late)
            if not isinstance(outcome, str):
                return outcome
            last_error = outcome
            if late:
                continue
            self._renewal_failed()
            log.debug("renewal of %s failed (%s); retrying", self._subject(), last_error)
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
                log.exception("on_lost callback of %s failed", self._subject())


class _Attempt:
    """One renewal on a daemon thread of its own, so the watchdog can stop
    waiting for it at the safe deadline whatever the socket does."""

    def __init__(self, fn: Callable[[], Renewed]) -> None:
        self.done = threading.Event()
        self.result: Union[Renewed, BaseException, None] = None
        self._fn = fn
        threading.Thread(target=self._run, name="leasehold-renew", daemon=True).start()

    def _run(self) -> None:
        try:
            self.result = self._fn()
        except BaseException as e:
            self.result = e
        finally:
            self.done.set()


class TaskWatchdog(Kept):
    """A :class:`Kept` renewed by an asyncio task; :attr:`lost` is an
    :class:`asyncio.Event` and ``on_lost`` may be a coroutine function."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lost: Optional[asyncio.Event] = None
        self._task: Optional[asyncio.Task[None]] = None

    @property
    def lost(self) -> asyncio.Event:
        """Set when it can no longer be known to be held. (Made on first use,
        inside the running event loop.)"""
        if self._lost is None:
            self._lost = asyncio.Event()
        return self._lost

    async def _renewal(self, timing: Timing, deadline: float) -> Renewed:
        """Sends one renewal, giving up at ``deadline``."""
        raise NotImplementedError

    def _start_watchdog(self, timing: Timing, anchor: float) -> None:
        self._begin(timing, anchor)
        # Called inside the running loop, before the guard is handed out:
        # lost is bound to this loop before the watchdog can set it (Python
        # 3.9 binds an Event to the loop current when it is made).
        _ = self.lost
        self._task = asyncio.ensure_future(self._watchdog(anchor))

    async def _stop_watchdog(self) -> None:
        self._mark_released()
        task, self._task = self._task, None
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            # asyncio.wait, not `await task` under suppress(CancelledError):
            # that also swallowed a cancel of this caller (a wait_for around
            # release timed out and then returned as if released).
            await asyncio.wait({task})
            if not task.cancelled():
                task.result()

    async def _watchdog(self, anchor: float) -> None:
        try:
            await self._keep(anchor)
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            await self._fire(LostReason("expired", f"the watchdog stopped: {e!r}"))
            raise

    def _is_released(self) -> bool:
        with self._mutex:
            return self._released

    async def _keep(self, anchor: float) -> None:
        timing = self._timing
        assert timing is not None
        # Released is checked as well as the cancel relied on: before Python
        # 3.12, asyncio.wait_for returns the renewal's result and drops a
        # cancel that arrives as the renewal completes, and this loop would
        # renew on while _stop_watchdog waits for it forever.
        while not self._is_released():
            await asyncio.sleep(max(0.0, anchor + timing.interval - time.monotonic()))
            if self._is_released():
                return
            outcome = await self._renew_before(timing, timing.deadline(anchor))
            if outcome is None or self._is_released():
                return
            if isinstance(outcome, LostReason):
                await self._fire(outcome)
                return
            anchor = outcome
            self._extend(anchor)

    async def _renew_before(
        self, timing: Timing, deadline: float
    ) -> Union[float, LostReason, None]:
        """Renews, retrying failures, until ``deadline``: the new anchor, the
        reason it is lost, or None when released meanwhile."""
        backoff = INITIAL_BACKOFF
        last_error = "no renewal attempt finished"
        while not self._is_released():
            if time.monotonic() >= deadline:
                return LostReason("expired", f"no renewal before the safe deadline ({last_error})")
            started = time.monotonic()
            result: Union[Renewed, BaseException]
            try:
                result = await asyncio.wait_for(
                    self._renewal(timing, deadline),
                    timeout=max(0.0, deadline - time.monotonic()),
                )
            except asyncio.TimeoutError:
                last_error = "the renewal was still unanswered at the safe deadline"
                continue
            except Exception as e:
                result = e
            late = time.monotonic() >= deadline
            outcome = self._judge(result, started, late)
            if not isinstance(outcome, str):
                return outcome
            last_error = outcome
            if late:
                continue
            self._renewal_failed()
            log.debug("renewal of %s failed (%s); retrying", self._subject(), last_error)
            await asyncio.sleep(max(0.0, min(backoff, deadline - time.monotonic())))
            backoff = min(backoff * 2, MAX_BACKOFF)
        return None

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
                log.exception("on_lost callback of %s failed", self._subject())
