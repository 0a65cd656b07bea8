"""Typed results of the API calls (plain dataclasses)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from .errors import DecodeError

#: Default drift margin as a fraction of the ttl (as the Rust client: ttl / 10).
DEFAULT_MARGIN_FRACTION = 0.1


def _int(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise DecodeError(f"expected an integer {key!r} in {data!r}")
    return value


def _opt_int(data: dict[str, Any], key: str) -> Optional[int]:
    value = data.get(key)
    return None if value is None else _int(data, key)


def _str(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise DecodeError(f"expected a string {key!r} in {data!r}")
    return value


def _bool(data: dict[str, Any], key: str) -> bool:
    value = data.get(key)
    if not isinstance(value, bool):
        raise DecodeError(f"expected a boolean {key!r} in {data!r}")
    return value


@dataclass(frozen=True)
class Permits:
    """Permits of a semaphore, with the instant their request was sent (the
    anchor of their lease, as a :class:`Lease`'s ``sent_at``)."""

    name: str
    owner: str
    #: The index of the entry that granted them: above every earlier grant
    #: of the semaphore.
    token: int
    permits: int
    limit: int
    ttl_ms: int
    expires_in_ms: int
    deadline_tick: int
    sent_at: float
    reacquired: Optional[bool] = None

    @classmethod
    def from_json(cls, data: dict[str, Any], sent_at: float) -> Permits:
        reacquired = data.get("reacquired")
        return cls(
            name=_str(data, "name"),
            owner=_str(data, "owner"),
            token=_int(data, "token"),
            permits=_int(data, "permits"),
            limit=_int(data, "limit"),
            ttl_ms=_int(data, "ttl_ms"),
            expires_in_ms=_int(data, "expires_in_ms"),
            deadline_tick=_int(data, "deadline_tick"),
            sent_at=sent_at,
            reacquired=reacquired if isinstance(reacquired, bool) else None,
        )


@dataclass(frozen=True)
class Lease:
    """A grant or renewal, with the instant its request was sent.

    ``sent_at`` is the send time of the call's *first* attempt on this
    process's ``time.monotonic()`` clock: the anchor of the lease. A retry
    may be answered from the request-id record of an earlier attempt, whose
    commit came after the first send, never before it.

    A lease held under a session lasts as long as the session, whose
    deadline its acquire does not restart: for those that a
    :class:`~leasehold.Session` guard answers, ``sent_at`` is the session's
    anchor instead (the start of its last successful keepalive, or of its
    create). One from ``Client.acquire(..., session=...)`` keeps the
    acquire's send time, which anchors nothing: its deadline is the
    session's, which whoever keeps the session alive knows.
    """

    name: str
    owner: str
    token: int
    ttl_ms: int
    #: Real time the lease lasts from the *commit* of the entry (which this
    #: process cannot observe): not a deadline for the client, see valid_until.
    expires_in_ms: int
    deadline_tick: int
    sent_at: float
    #: True when the owner already held the lock (same token, lease
    #: restarted); ``None`` on a renewal.
    reacquired: Optional[bool] = None

    @classmethod
    def from_json(cls, data: dict[str, Any], sent_at: float) -> Lease:
        reacquired = data.get("reacquired")
        return cls(
            name=_str(data, "name"),
            owner=_str(data, "owner"),
            token=_int(data, "token"),
            ttl_ms=_int(data, "ttl_ms"),
            expires_in_ms=_int(data, "expires_in_ms"),
            deadline_tick=_int(data, "deadline_tick"),
            sent_at=sent_at,
            reacquired=reacquired if isinstance(reacquired, bool) else None,
        )

    def valid_until(self, margin: Optional[float] = None) -> float:
        """Until when (on ``time.monotonic()``) the holder may act on this lease:
        ``sent_at + ttl - margin``. The cluster cannot expire it earlier; the
        margin (seconds, default ttl / 10) covers clock-rate drift between
        this machine and the leader."""
        ttl = self.ttl_ms / 1000.0
        if margin is None:
            margin = ttl * DEFAULT_MARGIN_FRACTION
        return max(self.sent_at, self.sent_at + ttl - margin)


@dataclass(frozen=True)
class Leases:
    """Locks granted together by one multi-acquire: one :class:`Lease` per
    lock, in the order asked, all under the one fencing ``token`` (the index
    of the log entry that granted them), all anchored at ``sent_at``.

    ``reacquired`` is true when the owner already held every lock under
    ``token`` (a retried multi-acquire; every lease restarted): then it is
    true on every grant too.
    """

    token: int
    grants: list[Lease]
    reacquired: bool
    sent_at: float

    @classmethod
    def from_json(cls, data: dict[str, Any], sent_at: float) -> Leases:
        token, reacquired = _int(data, "token"), _bool(data, "reacquired")
        grants = data.get("grants")
        if not isinstance(grants, list) or not grants:
            raise DecodeError(f"expected a non-empty list 'grants' in {data!r}")
        leases = []
        for grant in grants:
            if not isinstance(grant, dict):
                raise DecodeError(f"expected a grant object, got {grant!r}")
            lease = Lease.from_json({**grant, "reacquired": reacquired}, sent_at)
            # The cluster never mixes tokens in one answer; a grant that does
            # would fence writes under a token the set does not hold.
            if lease.token != token:
                raise DecodeError(f"grant of {lease.name!r} has token {lease.token}, not {token}")
            leases.append(lease)
        return cls(token=token, grants=leases, reacquired=reacquired, sent_at=sent_at)

    @property
    def names(self) -> list[str]:
        return [lease.name for lease in self.grants]

    def grant(self, name: str) -> Lease:
        """The grant of lock ``name``; ``KeyError`` if it is not in the set."""
        for lease in self.grants:
            if lease.name == name:
                return lease
        raise KeyError(name)

    def valid_until(self, margin: Optional[float] = None) -> float:
        """Until when the holder may act on every lock of the set: the
        earliest :meth:`Lease.valid_until` of its grants."""
        return min(lease.valid_until(margin) for lease in self.grants)


@dataclass(frozen=True)
class Waiter:
    owner: str
    #: 1 = next in line.
    position: int


@dataclass(frozen=True)
class LeaseView:
    """A held lock as a (linearizable) read sees it."""

    name: str
    owner: str
    token: int
    ttl_ms: int
    #: Lower bound on the real time left, in whole tick periods.
    expires_in_ms: int
    deadline_tick: int
    request_id: Optional[str] = None
    waiters: list[Waiter] = field(default_factory=list)
    #: The session the lease lives by (``ttl_ms`` and the deadline are then
    #: the session's), ``None`` for a lease with a ttl of its own.
    session: Optional[int] = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LeaseView:
        waiters = data.get("waiters") or []
        if not isinstance(waiters, list):
            raise DecodeError(f"expected a list 'waiters' in {data!r}")
        request_id = data.get("request_id")
        return cls(
            name=_str(data, "name"),
            owner=_str(data, "owner"),
            token=_int(data, "token"),
            ttl_ms=_int(data, "ttl_ms"),
            expires_in_ms=_int(data, "expires_in_ms"),
            deadline_tick=_int(data, "deadline_tick"),
            request_id=request_id if isinstance(request_id, str) else None,
            waiters=[Waiter(owner=_str(w, "owner"), position=_int(w, "position")) for w in waiters],
            session=_opt_int(data, "session"),
        )


@dataclass(frozen=True)
class Leader:
    """The leader of an election: what a campaign, a proclaim and a read of
    the election answer. ``token`` is the index of the entry that elected
    it; ``index`` (reads only) the log index the read reflects, after which
    an observer that re-read resumes."""

    name: str
    candidate: str
    token: int
    value: Any
    ttl_ms: int
    expires_in_ms: int
    deadline_tick: int
    sent_at: float
    since_tick: Optional[int] = None
    session: Optional[int] = None
    reacquired: Optional[bool] = None
    index: Optional[int] = None

    @classmethod
    def from_json(cls, data: dict[str, Any], sent_at: float) -> Leader:
        reacquired = data.get("reacquired")
        return cls(
            name=_str(data, "name"),
            candidate=_str(data, "candidate"),
            token=_int(data, "token"),
            value=data.get("value"),
            ttl_ms=_int(data, "ttl_ms"),
            expires_in_ms=_int(data, "expires_in_ms"),
            deadline_tick=_int(data, "deadline_tick"),
            sent_at=sent_at,
            since_tick=_opt_int(data, "since_tick"),
            session=_opt_int(data, "session"),
            reacquired=reacquired if isinstance(reacquired, bool) else None,
            index=_opt_int(data, "index"),
        )

    @property
    def lease(self) -> Lease:
        """The leadership as the lease of the election's lock."""
        return Lease(
            self.name,
            self.candidate,
            self.token,
            self.ttl_ms,
            self.expires_in_ms,
            self.deadline_tick,
            self.sent_at,
            self.reacquired,
        )


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch: its ``id`` (resume after it), the entry
    ``index``, the lock or election ``name``, its ``type`` (``acquired``,
    ``released``, ``proclaimed``, ...), the whole event as ``data``, and
    ``by``, who caused it: ``user:NAME``, ``client``, ``admin``, ``cluster``
    (expiries and what else a tick does), or ``unknown`` (also from a server
    of an earlier version, which does not send it)."""

    id: str
    index: int
    name: str
    type: str
    data: dict[str, Any]
    by: str = "unknown"

    @classmethod
    def from_json(cls, event_id: str, data: dict[str, Any]) -> WatchEvent:
        by = data.get("by")
        by = by if isinstance(by, str) else "unknown"
        return cls(event_id, _int(data, "index"), _str(data, "name"), _str(data, "type"), data, by)


@dataclass(frozen=True)
class Released:
    name: str
    token: int
    released: bool

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Released:
        return cls(_str(data, "name"), _int(data, "token"), _bool(data, "released"))


@dataclass(frozen=True)
class ReleasedMany:
    """The answer to a multi-release: every lock of ``names``, held under
    ``token``, released in one log entry."""

    names: list[str]
    token: int
    released: bool

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReleasedMany:
        names = data.get("names")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise DecodeError(f"expected a list of strings 'names' in {data!r}")
        return cls(names, _int(data, "token"), _bool(data, "released"))


@dataclass(frozen=True)
class SessionLock:
    """A lock held under a session, as ``GET /v1/sessions/{id}`` lists it."""

    name: str
    token: int


@dataclass(frozen=True)
class SessionView:
    """A session, as create, keepalive, get and list answer it.

    ``sent_at`` is the send time of the call's first attempt on this
    process's ``time.monotonic()`` (as :attr:`Lease.sent_at`): a create or
    keepalive anchors the session there, and so every lock under it.
    """

    #: The id: the index of the log entry that created the session.
    session: int
    owner: str
    ttl_ms: int
    #: Real time left from the *commit* of the answering entry (not a
    #: deadline for the client: see :meth:`leasehold.Session.valid_until`).
    expires_in_ms: int
    deadline_tick: int
    #: Locks held under the session, and locks its waiters are queued for.
    lock_count: int
    waiting_count: int
    sent_at: float
    #: ``get_session`` only: the locks held under it, in name order.
    locks: Optional[list[SessionLock]] = None

    @classmethod
    def from_json(cls, data: dict[str, Any], sent_at: float) -> SessionView:
        locks = data.get("locks")
        if locks is not None and not isinstance(locks, list):
            raise DecodeError(f"expected a list 'locks' in {data!r}")
        return cls(
            session=_int(data, "session"),
            owner=_str(data, "owner"),
            ttl_ms=_int(data, "ttl_ms"),
            expires_in_ms=_int(data, "expires_in_ms"),
            deadline_tick=_int(data, "deadline_tick"),
            lock_count=_int(data, "lock_count"),
            waiting_count=_int(data, "waiting_count"),
            sent_at=sent_at,
            locks=None
            if locks is None
            else [SessionLock(_str(lock, "name"), _int(lock, "token")) for lock in locks],
        )


@dataclass(frozen=True)
class SessionDeleted:
    """The answer to a session delete: every lock it held, released (each
    handed to its first waiter) in the same log entry."""

    session: int
    deleted: bool
    released: list[str]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionDeleted:
        released = data.get("released")
        if not isinstance(released, list) or not all(isinstance(n, str) for n in released):
            raise DecodeError(f"expected a list of strings 'released' in {data!r}")
        return cls(_int(data, "session"), _bool(data, "deleted"), released)


@dataclass(frozen=True)
class CheckResult:
    """Whether ``token`` was the current token of ``lock`` when answered."""

    lock: str
    current: bool
    #: The current holder's token, ``None`` when the lock is free.
    token: Optional[int]

    def __bool__(self) -> bool:
        return self.current

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CheckResult:
        return cls(_str(data, "lock"), _bool(data, "current"), _opt_int(data, "token"))


@dataclass(frozen=True)
class RecordWritten:
    key: str
    lock: str
    token: int
    #: Index of the log entry that wrote the record.
    index: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RecordWritten:
        return cls(_str(data, "key"), _str(data, "lock"), _int(data, "token"), _int(data, "index"))


@dataclass(frozen=True)
class Record:
    key: str
    value: Any
    #: The lock whose holder wrote it, and the holder's token.
    lock: str
    token: int
    index: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        if "value" not in data:
            raise DecodeError(f"expected 'value' in {data!r}")
        return cls(
            _str(data, "key"), data["value"], _str(data, "lock"), _int(data, "token"),
            _int(data, "index"),
        )  # fmt: skip


@dataclass(frozen=True)
class GateResult:
    resource: str
    lock: str
    admitted: bool
    #: The highest token admitted so far (this one).
    highest: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GateResult:
        return cls(
            _str(data, "resource"), _str(data, "lock"), _bool(data, "admitted"),
            _int(data, "highest"),
        )  # fmt: skip


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")


@dataclass(frozen=True)
class SqlFence:
    """The pieces of a fenced SQL write (see ``fence_sql``).

    ``predicate`` goes into the ``WHERE`` clause, ``assignment`` into ``SET``,
    ``params`` into the driver's parameters (merge it with your own).
    """

    predicate: str
    assignment: str
    params: dict[str, int]


def fence_sql(
    token: int,
    column: str = "fence",
    *,
    param: str = "token",
    strict: bool = False,
    style: str = "pyformat",
) -> SqlFence:
    """SQL text that makes a write conditional on ``token``.

    ``column`` holds the highest token that wrote the row. The predicate is
    ``column <= token`` (one holder may write several times under one token)
    or, with ``strict``, ``column < token`` (each token writes once). ``style``
    is the DB-API paramstyle: ``"pyformat"`` (``%(token)s``: psycopg, PyMySQL)
    or ``"named"`` (``:token``: sqlite3, SQLAlchemy ``text()``, oracledb).
    ``column`` and ``param`` must be plain identifiers (``table.column``
    allowed); they are put into the SQL text, the token never is.
    """
    if not _IDENT.match(column):
        raise ValueError(f"column {column!r} is not a plain SQL identifier")
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", param):
        raise ValueError(f"param {param!r} is not a plain identifier")
    if style == "pyformat":
        placeholder = f"%({param})s"
    elif style == "named":
        placeholder = f":{param}"
    else:
        raise ValueError(f"style must be 'pyformat' or 'named', not {style!r}")
    op = "<" if strict else "<="
    bare = column.rsplit(".", 1)[-1]
    return SqlFence(
        predicate=f"{column} {op} {placeholder}",
        assignment=f"{bare} = {placeholder}",
        params={param: token},
    )
