"""The client of one leasehold cluster: :class:`~leasehold.AsyncClient` is
written in ``leasehold/_async/client.py``, :class:`~leasehold.Client`
generated from it into ``leasehold/_sync/client.py`` (see
:mod:`leasehold._async`)."""

from __future__ import annotations

import builtins
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar, Union

import httpx

from leasehold import _calls as calls
from leasehold._core import (
    DEFAULT_RETRY_BUDGET,
    DEFAULT_TIMEOUT,
    INITIAL_BACKOFF,
    MAX_ANSWER_BYTES,
    MAX_BACKOFF,
    Core,
    Retry,
    answer_refusal,
    answer_too_large,
    asleep,
    ssl_context,
    to_ms,
    unreachable,
    untrusted,
)
from leasehold.errors import LeaseholdError
from leasehold.types import (
    CheckResult,
    GateResult,
    Leader,
    Lease,
    Leases,
    LeaseView,
    Permits,
    Record,
    RecordWritten,
    Released,
    ReleasedMany,
    SessionDeleted,
    SessionView,
)

if TYPE_CHECKING:
    from leasehold._watchdog import LostReason

    from .election import AsyncElection
    from .lock import AsyncLock, AsyncReadLock, AsyncWriteLock
    from .multi import AsyncLockSet
    from .semaphore import AsyncSemaphore
    from .session import AsyncSession
    from .watch import AsyncWatch

T = TypeVar("T")


class AsyncClient:
    """A client of one leasehold cluster: :class:`~leasehold.Client` is
    thread-safe; :class:`~leasehold.AsyncClient` is the same for asyncio, every
    call awaited (``aclose()`` for ``close()``, ``async with`` for ``with``).

    ``endpoints`` are any nodes of the cluster, as ``host:port`` or
    ``http(s)://host:port`` (a list or a comma-separated string); without a
    scheme they are ``https`` when ``ca_file`` is given, else ``http``.
    ``token`` is sent as ``authorization: Bearer <token>`` on every request.
    ``ca_file`` is the only CA trusted for https. ``cert`` is a client
    certificate to present over https, as ``(certfile, keyfile)`` (PEM): to
    nodes started with ``--client-trusted-ca`` its subject's Common Name
    names the user when no ``token`` is given. ``timeout`` bounds one
    attempt (seconds); ``retry_budget`` how long one call keeps retrying
    unreachable nodes and 503 answers.

    Every request goes to the node believed to lead (learned from the
    ``x-leasehold-leader-addr`` header), moves to the next endpoint when a
    node is unreachable, and retries 503 answers after the server's
    ``Retry-After`` (plus jitter). Every mutation carries a request id, the
    same on every retry of one call, so a retry the cluster already applied
    returns the original result (the same token), also from a new leader.
    Other errors are raised at once (see :mod:`leasehold.errors`).

    Durations in arguments are seconds (floats); durations in results keep
    the API's milliseconds (``ttl_ms``, ``expires_in_ms``).
    """

    def __init__(
        self,
        endpoints: Union[str, Sequence[str]],
        token: Optional[str] = None,
        ca_file: Optional[str] = None,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        cert: Optional[tuple[str, str]] = None,
        retry_budget: float = DEFAULT_RETRY_BUDGET,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        self._core = Core(
            endpoints, token=token, ca_file=ca_file, timeout=timeout, retry_budget=retry_budget
        )
        verify = ssl_context(ca_file, cert)
        self._http = httpx.AsyncClient(
            verify=verify, trust_env=False, transport=transport, timeout=timeout
        )
        # Waiting acquires: HTTP/2 (prior knowledge on http, ALPN on https),
        # so many waits share one connection; the rest stays on HTTP/1.1.
        self._waiting = httpx.AsyncClient(
            verify=verify,
            trust_env=False,
            transport=transport,
            timeout=timeout,
            http1=False,
            http2=True,
        )

    # --- lifecycle -------------------------------------------------------------

    async def aclose(self) -> None:
        await self._http.aclose()
        await self._waiting.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.aclose()

    @property
    def endpoints(self) -> list[str]:
        return [e.base for e in self._core.endpoints]

    # --- locks -----------------------------------------------------------------

    async def acquire(
        self,
        name: str,
        owner: str,
        ttl: Optional[float] = None,
        *,
        wait: Optional[float] = None,
        request_id: Optional[str] = None,
        lock_delay: Optional[float] = None,
        session: Optional[int] = None,
        seq: Optional[int] = None,
        shared: bool = False,
    ) -> Lease:
        """Acquires ``name`` for ``owner`` for ``ttl`` seconds (3 s to 1 h),
        or, with ``session`` (an id) instead of ``ttl``, for as long as that
        session lives (``owner`` must be the session's; exactly one of the
        two, else ``InvalidArgument`` before anything is sent). ``seq`` is
        the request's number in the session's sequence (see :class:`Session`,
        which counts for you).

        Without ``wait``, raises :class:`~leasehold.errors.HeldByOther` when
        another owner holds it; with ``wait`` (seconds) queues and returns
        when the lock passes to ``owner``, or raises
        :class:`~leasehold.errors.WaitTimeout`. The same owner acquiring
        again gets its grant back (same token, ``reacquired``).

        ``lock_delay`` (seconds, at most 300): should this lease expire
        rather than be released, nobody is granted the lock for that long
        after the expiry, so a holder that was only paused wakes up to find
        nobody acting under the lock yet. Meanwhile a try-acquire raises
        :class:`~leasehold.errors.LockDelayed`; a waiting one is granted when
        the delay ends.

        ``shared=True`` takes a shared lease (a read lock, ``ttl`` only):
        shared holders coexist, an exclusive holder excludes them all, and a
        waiting exclusive acquire blocks later shared ones. Renew and release
        it with ``shared_owner=owner``.
        """
        wait_ms = calls.seconds_to_ms(wait, "wait")
        lock_delay_ms = calls.seconds_to_ms(lock_delay, "lock_delay")
        call = calls.acquire(
            name, owner, calls.optional_ms(ttl, "ttl"), wait_ms, request_id, lock_delay_ms,
            session=session, seq=seq, shared=shared,
        )  # fmt: skip
        return await self._run(call)

    async def _acquire_ms(
        self,
        name: str,
        owner: str,
        ttl_ms: int,
        wait_ms: int = 0,
        request_id: Optional[str] = None,
        lock_delay_ms: int = 0,
        shared: bool = False,
    ) -> Lease:
        return await self._run(
            calls.acquire(name, owner, ttl_ms, wait_ms, request_id, lock_delay_ms, shared=shared)
        )

    async def renew(
        self,
        name: str,
        token: int,
        ttl: Optional[float] = None,
        *,
        request_id: Optional[str] = None,
        shared_owner: Optional[str] = None,
    ) -> Lease:
        """Restarts the lease held under ``token`` (for ``ttl`` seconds, or
        the grant's ttl); a shared lease names its owner in ``shared_owner``.
        Raises ``StaleToken`` or ``NotHeld`` when it ended."""
        ttl_ms = calls.optional_ms(ttl, "ttl")
        return await self._run(
            calls.renew(name, token, ttl_ms, request_id, shared_owner=shared_owner)
        )

    async def _renew_ms(
        self,
        name: str,
        token: int,
        ttl_ms: int,
        deadline: float,
        shared_owner: Optional[str] = None,
    ) -> Lease:
        call = calls.renew(name, token, ttl_ms, shared_owner=shared_owner)
        return await self._run(call, deadline=deadline)

    async def release(
        self,
        name: str,
        token: int,
        *,
        request_id: Optional[str] = None,
        session: Optional[int] = None,
        seq: Optional[int] = None,
        shared_owner: Optional[str] = None,
    ) -> Released:
        """Releases the lock held under ``token``. ``session`` (which must be
        the one the lock is held under) is needed only to number the release
        with ``seq`` in that session's sequence; a shared lease names its
        owner in ``shared_owner``."""
        call = calls.release(
            name, token, request_id, session=session, seq=seq, shared_owner=shared_owner
        )
        return await self._run(call)

    async def acquire_many(
        self,
        names: Sequence[str],
        owner: str,
        ttl: Optional[float] = None,
        *,
        wait: Optional[float] = None,
        request_id: Optional[str] = None,
        lock_delay: Optional[float] = None,
        session: Optional[int] = None,
        seq: Optional[int] = None,
    ) -> Leases:
        """Acquires every lock of ``names`` (1 to 64 distinct names) for
        ``owner`` in one log entry, under one fencing token, or none of them.

        Without ``wait``, a list with a lock that cannot be granted now
        raises :class:`~leasehold.errors.HeldByOther`, granting nothing; its
        ``conflicts`` names every lock in the way and why. With ``wait``
        (seconds) the owner queues for every lock at once and holds none of
        them until it can have all (then they are granted together), or
        raises :class:`~leasehold.errors.WaitTimeout`, leaving every queue.
        ``ttl``, ``request_id`` and ``lock_delay`` are as for
        :meth:`acquire`, for each lock. The owner holding every lock under
        one token already gets those grants back (``reacquired``).
        ``session`` and ``seq`` as for :meth:`acquire`: every lock then lives
        as long as the session.
        """
        wait_ms = calls.seconds_to_ms(wait, "wait")
        lock_delay_ms = calls.seconds_to_ms(lock_delay, "lock_delay")
        call = calls.acquire_many(
            names, owner, calls.optional_ms(ttl, "ttl"), wait_ms, request_id, lock_delay_ms,
            session=session, seq=seq,
        )  # fmt: skip
        return await self._run(call)

    async def release_many(
        self, names: Sequence[str], token: int, *, request_id: Optional[str] = None
    ) -> ReleasedMany:
        """Releases every lock of ``names``, all held under ``token`` (the
        one a multi-acquire answered), in one log entry, or none of them:
        ``NotHeld`` / ``StaleToken`` for the first that is not held so."""
        return await self._run(calls.release_many(names, token, request_id))

    async def get(self, name: str) -> Optional[LeaseView]:
        """The lease of ``name`` (linearizable), ``None`` when it is free."""
        return await self._run(calls.get(name))

    async def list(self, prefix: str = "", limit: int = 100) -> builtins.list[LeaseView]:
        """Held locks whose names start with ``prefix`` (at most ``limit``,
        1 to 1000), in name order."""
        return await self._run(calls.list_locks(prefix, limit))

    def lock(
        self,
        name: str,
        ttl: float = 10.0,
        wait: Optional[float] = None,
        *,
        owner: Optional[str] = None,
        drift_margin: Optional[float] = None,
        on_lost: Optional[Callable[[LostReason], object]] = None,
        lock_delay: Optional[float] = None,
    ) -> AsyncLock:
        """A lock guard on ``name``: a :class:`~leasehold.lock.Lock` (``with``,
        a watchdog thread) from a :class:`~leasehold.Client`, an
        :class:`~leasehold.lock.AsyncLock` (``async with``, a watchdog task)
        from an :class:`~leasehold.AsyncClient`. Acquired on entering the
        block (or by its ``acquire()``), renewed by the watchdog every
        ``ttl / 3``, released on exit. ``lock_delay`` as for :meth:`acquire`:
        it matters exactly when the watchdog fails and the lease expires."""
        from .lock import AsyncLock

        return AsyncLock(
            self,
            name,
            ttl=ttl,
            wait=wait,
            owner=owner,
            drift_margin=drift_margin,
            on_lost=on_lost,
            lock_delay=lock_delay,
        )

    def read_lock(
        self,
        name: str,
        ttl: float = 10.0,
        wait: Optional[float] = None,
        *,
        owner: Optional[str] = None,
        drift_margin: Optional[float] = None,
        on_lost: Optional[Callable[[LostReason], object]] = None,
    ) -> AsyncReadLock:
        """A guard holding ``name`` in shared mode, as :meth:`lock` holds it
        exclusively: readers hold it together, a writer excludes them."""
        from .lock import AsyncReadLock

        return AsyncReadLock(
            self, name, ttl=ttl, wait=wait, owner=owner, drift_margin=drift_margin, on_lost=on_lost
        )

    def write_lock(
        self,
        name: str,
        ttl: float = 10.0,
        wait: Optional[float] = None,
        *,
        owner: Optional[str] = None,
        drift_margin: Optional[float] = None,
        on_lost: Optional[Callable[[LostReason], object]] = None,
    ) -> AsyncWriteLock:
        """A guard holding ``name`` exclusively: :meth:`lock`, typed as the
        writer's side of a read/write lock."""
        from .lock import AsyncWriteLock

        return AsyncWriteLock(
            self, name, ttl=ttl, wait=wait, owner=owner, drift_margin=drift_margin, on_lost=on_lost
        )

    # --- semaphores ------------------------------------------------------------

    async def acquire_permits(
        self,
        name: str,
        owner: str,
        limit: int,
        ttl: float,
        *,
        permits: int = 1,
        wait: Optional[float] = None,
        request_id: Optional[str] = None,
    ) -> Permits:
        """Takes ``permits`` of semaphore ``name`` (all or none) for ``owner``
        for ``ttl`` seconds. The acquire that creates the semaphore sets its
        ``limit``; another limit raises
        :class:`~leasehold.errors.LimitMismatch`. Without ``wait`` raises
        :class:`~leasehold.errors.SemaphoreFull` when too few are free or
        others wait first; with it, waits in the FIFO queue
        (:class:`~leasehold.errors.WaitTimeout`,
        :class:`~leasehold.errors.Deadlock`)."""
        ttl_ms = calls.seconds_to_ms(ttl, "ttl")
        wait_ms = calls.seconds_to_ms(wait, "wait")
        return await self._acquire_permits_ms(
            name, owner, limit, permits, ttl_ms, wait_ms, request_id
        )

    async def _acquire_permits_ms(
        self,
        name: str,
        owner: str,
        limit: int,
        permits: int,
        ttl_ms: int,
        wait_ms: int = 0,
        request_id: Optional[str] = None,
    ) -> Permits:
        call = calls.acquire_permits(name, owner, limit, permits, ttl_ms, wait_ms, request_id)
        return await self._run(call)

    async def renew_permits(
        self, name: str, owner: str, token: int, ttl: Optional[float] = None
    ) -> Permits:
        """Restarts the lease of ``owner``'s permits held under ``token``."""
        ttl_ms = calls.optional_ms(ttl, "ttl")
        return await self._run(calls.renew_permits(name, owner, token, ttl_ms))

    async def _renew_permits_ms(
        self, name: str, owner: str, token: int, ttl_ms: int, deadline: float
    ) -> Permits:
        call = calls.renew_permits(name, owner, token, ttl_ms)
        return await self._run(call, deadline=deadline)

    async def release_permits(self, name: str, owner: str, token: int) -> dict[str, Any]:
        """Returns ``owner``'s permits held under ``token``; the waiters that
        now fit are granted at once."""
        return await self._run(calls.release_permits(name, owner, token))

    async def get_semaphore(self, name: str) -> Optional[dict[str, Any]]:
        """Semaphore ``name`` (linearizable: ``limit``, ``in_use``,
        ``holders``, ``waiters``), ``None`` when nobody holds or waits."""
        return await self._run(calls.get_semaphore(name))

    def semaphore(
        self,
        name: str,
        limit: int,
        ttl: float = 10.0,
        wait: Optional[float] = None,
        *,
        permits: int = 1,
        owner: Optional[str] = None,
        drift_margin: Optional[float] = None,
        on_lost: Optional[Callable[[LostReason], object]] = None,
    ) -> AsyncSemaphore:
        """A guard holding ``permits`` of semaphore ``name``: see
        :class:`~leasehold.semaphore.Semaphore`."""
        from .semaphore import AsyncSemaphore

        return AsyncSemaphore(
            self,
            name,
            limit=limit,
            permits=permits,
            ttl=ttl,
            wait=wait,
            owner=owner,
            drift_margin=drift_margin,
            on_lost=on_lost,
        )

    def lock_many(
        self,
        names: Sequence[str],
        ttl: float = 10.0,
        wait: Optional[float] = None,
        *,
        owner: Optional[str] = None,
        lock_delay: Optional[float] = None,
    ) -> AsyncLockSet:
        """A lock set on every lock of ``names``: a
        :class:`~leasehold.multi.LockSet` (``with``) from a
        :class:`~leasehold.Client`, an :class:`~leasehold.multi.AsyncLockSet`
        (``async with``) from an :class:`~leasehold.AsyncClient`. Acquired
        together on entering the block (or by its ``acquire()``) as by
        :meth:`acquire_many`, released together on exit. Nothing renews
        them: the work must fit in ``ttl``."""
        from .multi import AsyncLockSet

        return AsyncLockSet(self, names, ttl=ttl, wait=wait, owner=owner, lock_delay=lock_delay)

    # --- sessions --------------------------------------------------------------

    async def create_session(
        self, owner: str, ttl: float, *, request_id: Optional[str] = None
    ) -> SessionView:
        """Creates a session of ``owner`` whose ttl is ``ttl`` seconds (3 s to
        1 h). Locks acquired under it (``session=`` its id) live as long as
        it does: one keepalive keeps them all. Raises ``Full`` at the
        cluster's session limit. :meth:`session` also keeps it alive."""
        return await self._run(calls.create_session(owner, to_ms(ttl, "ttl"), request_id))

    async def keepalive(
        self,
        session: int,
        ttl: Optional[float] = None,
        *,
        seq: Optional[int] = None,
        request_id: Optional[str] = None,
    ) -> SessionView:
        """Restarts the session's deadline (with ``ttl`` seconds from now, or
        its ttl), and so every lock's under it. ``SessionNotFound`` once it
        has ended: its locks are gone."""
        ttl_ms = calls.optional_ms(ttl, "ttl")
        return await self._run(calls.keepalive(session, ttl_ms, request_id, seq))

    async def _keepalive_until(self, session: int, seq: int, deadline: float) -> SessionView:
        return await self._run(calls.keepalive(session, seq=seq), deadline=deadline)

    async def delete_session(self, session: int) -> SessionDeleted:
        """Ends the session now, releasing every lock under it (each handed to
        its first waiter) in one log entry. ``SessionNotFound`` if it had
        already ended."""
        return await self._run(calls.delete_session(session))

    async def get_session(self, session: int) -> Optional[SessionView]:
        """The session with its ``locks`` (linearizable), ``None`` once it
        has ended (or never existed)."""
        return await self._run(calls.get_session(session))

    async def list_sessions(self, after: int = 0, limit: int = 100) -> builtins.list[SessionView]:
        """Live sessions with ids above ``after`` (at most ``limit``, 1 to
        1000), in id order, without their locks: pass a page's last id as
        the next page's ``after``."""
        return await self._run(calls.list_sessions(after, limit))

    def session(
        self,
        owner: Optional[str] = None,
        ttl: float = 10.0,
        *,
        drift_margin: Optional[float] = None,
        on_lost: Optional[Callable[[LostReason], object]] = None,
    ) -> AsyncSession:
        """A session of ``owner`` (a fresh owner id by default): a
        :class:`~leasehold.session.Session` (``with``, a watchdog thread) from
        a :class:`~leasehold.Client`, an :class:`~leasehold.session.AsyncSession`
        (``async with``, a watchdog task) from an :class:`~leasehold.AsyncClient`.
        Created on entering the block (or by its ``open()``), kept alive by
        the watchdog every ``ttl / 3``, deleted on exit, which releases every
        lock taken under it with its ``lock()`` and ``lock_many()``."""
        from .session import AsyncSession

        return AsyncSession(self, owner, ttl=ttl, drift_margin=drift_margin, on_lost=on_lost)

    # --- elections -------------------------------------------------------------

    async def campaign(
        self,
        name: str,
        candidate: str,
        value: Any,
        ttl: float,
        *,
        wait: Optional[float] = None,
        request_id: Optional[str] = None,
    ) -> Leader:
        """Stands as ``candidate`` in election ``name`` announcing ``value``
        (JSON, at most 4 KiB), with a leadership of ``ttl`` seconds: the
        leader once elected, its ``token`` the index of the entry that
        elected it. Without ``wait``, :class:`~leasehold.errors.HeldByOther`
        naming the leader when another leads; with ``wait`` (seconds) waits
        its turn (FIFO) or raises :class:`~leasehold.errors.WaitTimeout`.
        The leadership is a lease: keep it with :meth:`renew` under its token,
        or use :meth:`election` for a guard whose watchdog does."""
        wait_ms = calls.seconds_to_ms(wait, "wait")
        return await self._run(
            calls.campaign(name, candidate, value, to_ms(ttl, "ttl"), wait_ms, request_id)
        )

    async def _campaign_ms(
        self, name: str, candidate: str, value: Any, ttl_ms: int, wait_ms: int
    ) -> Leader:
        return await self._run(calls.campaign(name, candidate, value, ttl_ms, wait_ms))

    async def proclaim(self, name: str, candidate: str, token: int, value: Any) -> Leader:
        """The leader under ``token`` announces ``value``: ``StaleToken`` for
        any other token."""
        return await self._run(calls.proclaim(name, candidate, token, value))

    async def resign(self, name: str, candidate: str, token: int) -> Released:
        """The leader under ``token`` steps down; the next waiting candidate
        is elected in the same entry."""
        return await self._run(calls.resign(name, candidate, token))

    async def leader(self, name: str) -> Optional[Leader]:
        """The leader of election ``name`` (linearizable, with the ``index``
        the read reflects), ``None`` when nobody leads."""
        return await self._run(calls.leader(name))

    def election(self, name: str) -> AsyncElection:
        """The election ``name``: campaign in it (a leadership guard), read
        or observe its leader."""
        from .election import AsyncElection

        return AsyncElection(self, name)

    def watch(self, prefix: Optional[str] = None, after: Optional[int] = None) -> AsyncWatch:
        """Every lock's applied events (those whose names start with
        ``prefix``), after log index ``after`` (from now on when ``None``),
        to iterate over; resumes on another node when one fails, and raises
        :class:`~leasehold.errors.Compacted` when asked for events older than
        the nodes keep."""
        from .watch import AsyncWatch

        return AsyncWatch(self, "/v1/events", prefix, None if after is None else str(after))

    def observe(self, name: str, after: Optional[int] = None) -> AsyncWatch:
        """The leadership changes of election ``name`` (see :meth:`watch`);
        without ``after`` starting with the current leader."""
        from .watch import AsyncWatch

        path = calls.observe_path(name)
        return AsyncWatch(self, path, None, None if after is None else str(after))

    # --- fencing ---------------------------------------------------------------

    async def check(self, lock: str, token: int) -> CheckResult:
        """Whether ``token`` is the current token of ``lock`` (linearizable).
        Good only for the moment it is answered."""
        return await self._run(calls.check(lock, token))

    async def put_record(
        self,
        key: str,
        lock: str,
        token: int,
        value: Any,
        *,
        request_id: Optional[str] = None,
    ) -> RecordWritten:
        """Writes ``value`` (JSON, at most 4 KiB) under ``key`` if ``token`` is
        the current token of ``lock``; raises ``StaleToken`` otherwise."""
        return await self._run(calls.put_record(key, lock, token, value, request_id))

    async def get_record(self, key: str) -> Optional[Record]:
        """The record ``key`` (linearizable), ``None`` if never written."""
        return await self._run(calls.get_record(key))

    async def gate(
        self, resource: str, lock: str, token: int, *, request_id: Optional[str] = None
    ) -> GateResult:
        """Passes ``token`` of ``lock`` through the gate ``resource``: admitted
        when not lower than any admitted before, ``StaleToken`` otherwise."""
        return await self._run(calls.gate(resource, lock, token, request_id))

    # --- cluster ---------------------------------------------------------------

    async def status(self, endpoint: Optional[int] = None) -> dict[str, Any]:
        """``/v1/cluster/status`` of whichever node answers; with
        ``endpoint`` (an index into the endpoints), of that node, no retries."""
        if endpoint is None:
            return await self._run(calls.status())
        url = self._core.url(endpoint, "/v1/cluster/status")
        try:
            response, body = await _exchange(self._http, "GET", url, headers=self._core.headers())
        except httpx.TransportError as e:
            raise unreachable(self._core.endpoints[endpoint], e) from e
        result = self._core.outcome(endpoint, response, body)
        if isinstance(result, Retry):
            raise result.error
        return result  # type: ignore[no-any-return]

    async def add_learner(self, node_id: int, addr: str) -> int:
        """Adds a non-voting member; returns the log index once it caught up."""
        return await self._run(calls.add_learner(node_id, addr))

    async def promote(self, node_id: int) -> int:
        return await self._run(calls.promote(node_id))

    async def remove_member(self, node_id: int) -> int:
        return await self._run(calls.remove_member(node_id))

    async def request(
        self,
        method: str,
        path: str,
        json: Optional[dict[str, Any]] = None,
        params: Optional[Mapping[str, str]] = None,
        *,
        wait: float = 0.0,
    ) -> Any:
        """Any API request, with leader following and retries; returns the
        decoded JSON answer or raises the error's class."""
        return await self._run(calls.raw(method, path, json, params, wait))

    # --- the retry loop --------------------------------------------------------

    async def _run(self, call: calls.Call[T], deadline: Optional[float] = None) -> T:
        try:
            data, sent_at = await self._send(call, deadline)
        except LeaseholdError as e:
            if call.none_on is not None and isinstance(e, call.none_on):
                return None  # type: ignore[return-value]
            raise
        return call.decode(data, sent_at)

    async def _send(self, call: calls.Call[Any], deadline: Optional[float]) -> tuple[Any, float]:
        """Sends ``call`` until it is answered (not 503) or the budget (or
        ``deadline``, on ``time.monotonic()``) is spent. Returns the JSON
        answer and the send time of the first attempt."""
        core = self._core
        first_sent = time.monotonic()
        give_up = core.give_up_at(first_sent, call.wait, deadline)
        backoff = INITIAL_BACKOFF
        probing_http1 = False
        # Tries left before the next pause that go to another node at once:
        # one refused the connection (the request never reached it: the node
        # is down, as its leader is after a crash) or named another leader in
        # its 503. At most one per other node between pauses, so nodes that
        # name each other, or all refusing, cannot make it spin.
        sweep = len(core.endpoints) - 1
        at_once = sweep
        while True:
            index = core.preferred()
            retry: Optional[Retry] = None
            over_http2 = core.waits_over_http2(call.wait, probing_http1)
            http = self._waiting if over_http2 else self._http
            try:
                response, body = await _exchange(
                    http,
                    call.method,
                    core.url(index, call.path),
                    json=call.body,
                    params=call.query,
                    headers=core.headers(),
                    timeout=core.attempt_timeout(call.wait, give_up),
                )
            except httpx.TransportError as e:
                if over_http2 and core.broke_over_http2(e):
                    probing_http1 = True
                    continue
                failure = unreachable(core.endpoints[index], e)
                if untrusted(e):
                    raise failure from e
                # Unreachable, refused, reset or timed out: try the next node.
                probing_http1 = False
                core.move_on_from(index)
                if isinstance(e, httpx.ConnectError) and at_once > 0:
                    at_once -= 1
                    continue
            else:
                if probing_http1:
                    core.answered_over_http1()
                    probing_http1 = False
                result = core.outcome(index, response, body)
                if not isinstance(result, Retry):
                    return result, first_sent
                retry, failure = result, result.error
                if retry.at_once and at_once > 0:
                    at_once -= 1
                    continue
            delay = core.next_delay(retry, backoff)
            if time.monotonic() + delay > give_up:
                raise failure
            await asleep(delay)
            backoff = min(backoff * 2, MAX_BACKOFF)
            at_once = sweep


async def _exchange(
    http: httpx.AsyncClient, method: str, url: str, **options: Any
) -> tuple[httpx.Response, bytes]:
    """``method url`` on ``http``: the answer, and its body, read no further
    than :data:`~leasehold._core.MAX_ANSWER_BYTES` (httpx would read any body
    whole before anyone could look at it). ``DecodeError`` for a longer body,
    or one that says it is, or an encoded one; transport errors as httpx
    raises them."""
    async with http.stream(method, url, **options) as response:
        refusal = answer_refusal(response)
        if refusal is not None:
            raise refusal
        body = bytearray()
        # Not decoded: answer_refusal let only unencoded bodies through.
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_ANSWER_BYTES:
                raise answer_too_large(response)
    return response, bytes(body)
