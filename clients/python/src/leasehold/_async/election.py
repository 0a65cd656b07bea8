"""Elections: :class:`~leasehold.election.AsyncElection` and its guard
:class:`~leasehold.election.AsyncLeadership` are written in
``leasehold/_async/election.py``, ``Election`` and ``Leadership`` generated
from them into ``leasehold/_sync/election.py`` (see :mod:`leasehold._async`).

An election is the lock of the same name whose holder carries a value, so
a leadership is kept exactly as a lock is: a ``Leadership`` is a lock guard
(the same watchdog, the same ``lost``, ``valid_until`` and ``token``) whose
grant is a campaign and whose release is a resign."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from leasehold._watchdog import LostReason
from leasehold.types import Leader, Lease, Released

from .lock import AsyncLock
from .watch import AsyncWatch

if TYPE_CHECKING:
    from .client import AsyncClient


class AsyncLeadership(AsyncLock):
    """A leadership of one election, kept by the watchdog of its lease: use
    it as a context manager (``async with`` for the asyncio flavour): entry
    campaigns (waiting up to ``wait`` seconds, FIFO, to be elected), exit
    stops the watchdog and resigns, handing over at once to the next
    candidate. :attr:`token` fences the leader's writes; :attr:`lost` is set
    by the safe deadline when the leadership can no longer be counted on."""

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        value: Any,
        *,
        ttl: float = 10.0,
        wait: Optional[float] = None,
        owner: Optional[str] = None,
        drift_margin: Optional[float] = None,
        on_lost: Optional[Callable[[LostReason], object]] = None,
    ) -> None:
        super().__init__(
            client,
            name,
            ttl=ttl,
            wait=wait,
            owner=owner,
            drift_margin=drift_margin,
            on_lost=on_lost,
        )
        self._value = value

    @property
    def value(self) -> Any:
        """The value this leader announced last."""
        return self._value

    async def _grant(self) -> Lease:
        leader = await self._client._campaign_ms(
            self._name, self._owner, self._value, self._ttl_ms, self._wait_ms
        )
        return leader.lease

    async def proclaim(self, value: Any) -> Leader:
        """Announces ``value``; ``StaleToken`` once the leadership has ended."""
        leader = await self._client.proclaim(self._name, self._owner, self.token, value)
        self._value = value
        return leader

    async def release(self) -> Released:
        """Stops the watchdog, then resigns (the next waiting candidate is
        elected in the same entry). Raises the cluster's error
        (``StaleToken``/``NotHeld`` when it was already lost) or
        ``Unavailable`` (the leadership then runs out after its ttl)."""
        token = self.token
        await self._stop_watchdog()
        return await self._client.resign(self._name, self._owner, token)

    async def resign(self) -> Released:
        """The same as :meth:`release`."""
        return await self.release()


class AsyncElection:
    """One election of one cluster: campaign in it, read or observe its
    leader."""

    def __init__(self, client: AsyncClient, name: str) -> None:
        self._client = client
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def campaign(
        self,
        value: Any,
        ttl: float = 10.0,
        wait: Optional[float] = None,
        *,
        owner: Optional[str] = None,
        drift_margin: Optional[float] = None,
        on_lost: Optional[Callable[[LostReason], object]] = None,
    ) -> AsyncLeadership:
        """A leadership guard announcing ``value`` (JSON, at most 4 KiB),
        elected on entering its block (or by its ``acquire()``)."""
        return AsyncLeadership(
            self._client,
            self._name,
            value,
            ttl=ttl,
            wait=wait,
            owner=owner,
            drift_margin=drift_margin,
            on_lost=on_lost,
        )

    async def leader(self) -> Optional[Leader]:
        """The current leader (linearizable, with the ``index`` the read
        reflects), ``None`` when nobody leads."""
        return await self._client.leader(self._name)

    def observe(self, after: Optional[int] = None) -> AsyncWatch:
        """The leadership changes (``proclaimed``, ``released``,
        ``expired``) to iterate over; without ``after`` starting with the
        current leader. Resumes on another node when one fails."""
        return self._client.observe(self._name, after)
