"""The semaphore guard: :class:`~leasehold.semaphore.AsyncSemaphore` is
written here, :class:`~leasehold.semaphore.Semaphore` generated from it
into ``leasehold/_sync/semaphore.py`` (see :mod:`leasehold._async`)."""

from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Optional

from leasehold._guards import SemaphoreBase
from leasehold._watchdog import LostReason, TaskWatchdog, Timing
from leasehold.errors import DecodeError, LeaseholdError
from leasehold.types import Permits

if TYPE_CHECKING:
    from .client import AsyncClient


class AsyncSemaphore(TaskWatchdog, SemaphoreBase):
    """Permits of a counting semaphore held through a client, kept by the
    watchdog of a lock guard (renewed every ``ttl / 3``, ``lost`` set no
    later than the safe deadline): a :class:`~leasehold.semaphore.Semaphore`
    from a :class:`~leasehold.Client`, an
    :class:`~leasehold.semaphore.AsyncSemaphore` from an
    :class:`~leasehold.AsyncClient`.

    Entering the block takes ``permits`` of at most ``limit`` (waiting up to
    ``wait`` seconds in the semaphore's FIFO queue; ``SemaphoreFull``,
    ``LimitMismatch``, ``WaitTimeout``, ``Deadlock`` propagate); leaving it
    stops the watchdog and returns them. A crashed holder's permits come
    back when their lease ends, never earlier.
    """

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        *,
        limit: int,
        permits: int = 1,
        ttl: float = 10.0,
        wait: Optional[float] = None,
        owner: Optional[str] = None,
        drift_margin: Optional[float] = None,
        on_lost: Optional[Callable[[LostReason], object]] = None,
    ) -> None:
        super().__init__(
            name,
            limit=limit,
            permits=permits,
            ttl=ttl,
            wait=wait,
            owner=owner,
            drift_margin=drift_margin,
            on_lost=on_lost,
        )
        self._client = client

    async def acquire(self) -> AsyncSemaphore:
        """Takes the permits and starts the watchdog; renews once first when
        the wait left less than a renewal interval before the safe deadline."""
        if self._token is not None:
            raise RuntimeError("the permits are already held")
        started = time.monotonic()
        held = await self._client._acquire_permits_ms(
            self._name, self._owner, self._limit, self._permits, self._ttl_ms, self._wait_ms
        )
        timing = self._granted_permits(held)
        anchor = min(started, held.sent_at)
        if timing.deadline(anchor) < time.monotonic() + timing.interval:
            started = time.monotonic()
            renewed = await self._client.renew_permits(
                self._name, self._owner, held.token, self._ttl_ms / 1000
            )
            if renewed.token != held.token:
                raise DecodeError(f"renewal of token {held.token} answered {renewed.token}")
            anchor = min(started, renewed.sent_at)
        self._token = held.token
        self._start_watchdog(timing, anchor)
        return self

    async def release(self) -> dict[str, Any]:
        """Stops the watchdog, then returns the permits."""
        token = self.token
        await self._stop_watchdog()
        return await self._client.release_permits(self._name, self._owner, token)

    async def _renewal(self, timing: Timing, deadline: float) -> Permits:
        return await self._client._renew_permits_ms(
            self._name, self._owner, self.token, timing.ttl_ms, deadline
        )

    async def __aenter__(self) -> AsyncSemaphore:
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
            self._release_failed(e, exc_type is not None)
