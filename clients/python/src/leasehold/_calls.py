"""Each API operation as a :class:`Call`: what to send and how to read the
answer. The sync and async clients only differ in how they run a Call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Generic, Optional, TypeVar

from ._core import MEMBERSHIP_WAIT, client_side, new_request_id, path_of, to_ms
from .errors import (
    ApiError,
    DecodeError,
    InvalidArgument,
    LeaseholdError,
    NoLeader,
    NoRecord,
    NoSemaphore,
    NotHeld,
    SessionNotFound,
)
from .types import (
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

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    decode: Callable[[Any, float], T]
    body: Optional[dict[str, Any]] = None
    query: Optional[Mapping[str, str]] = None
    #: How long the server may legitimately hold the request (seconds).
    wait: float = 0.0
    #: An error that means "nothing there": the call returns None instead.
    none_on: Optional[type[ApiError]] = None


def _dict(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise DecodeError(f"expected a JSON object, got {data!r}")
    return data


def _lease(data: Any, sent_at: float) -> Lease:
    return Lease.from_json(_dict(data), sent_at)


def _log_index(data: Any, _sent: float) -> int:
    index = _dict(data).get("log_index")
    if not isinstance(index, int):
        raise DecodeError(f"no log_index in {data!r}")
    return index


def _raw(data: Any, _sent: float) -> Any:
    return data


def _add_wait_and_delay(body: dict[str, Any], wait_ms: int, lock_delay_ms: int) -> None:
    """Zero means "not asked" for both (no wait, no delay): the field is
    left out, so a request reads as it did before either existed."""
    if wait_ms > 0:
        body["wait_ms"] = wait_ms
    if lock_delay_ms > 0:
        body["lock_delay_ms"] = lock_delay_ms


def _refused(message: str, field: str) -> LeaseholdError:
    return client_side(InvalidArgument(message, details={"field": field}))


def _add_lifetime(
    body: dict[str, Any], ttl_ms: Optional[int], session: Optional[int], seq: Optional[int]
) -> None:
    """An acquire's lease lives by its own ``ttl_ms`` or by a ``session``,
    exactly one: refused here as the server would (400 with ``field``), so
    the mistake shows without a round trip. ``seq`` numbers a request in
    its session's sequence and means nothing without one."""
    if (ttl_ms is None) == (session is None):
        both = "both" if session is not None else "neither"
        raise _refused(f"an acquire takes exactly one of ttl and session, not {both}", "ttl_ms")
    if ttl_ms is not None:
        body["ttl_ms"] = ttl_ms
    _add_session(body, session, seq)


def _add_session(body: dict[str, Any], session: Optional[int], seq: Optional[int]) -> None:
    if seq is not None and session is None:
        raise _refused("seq numbers a request in a session: it needs session", "seq")
    if session is not None:
        body["session"] = session
    if seq is not None:
        body["seq"] = seq


def acquire(
    name: str,
    owner: str,
    ttl_ms: Optional[int],
    wait_ms: int = 0,
    request_id: Optional[str] = None,
    lock_delay_ms: int = 0,
    *,
    session: Optional[int] = None,
    seq: Optional[int] = None,
    shared: bool = False,
) -> Call[Lease]:
    body: dict[str, Any] = {"owner": owner, "request_id": request_id or new_request_id()}
    _add_lifetime(body, ttl_ms, session, seq)
    _add_wait_and_delay(body, wait_ms, lock_delay_ms)
    if shared:
        body["mode"] = "shared"
    return Call("POST", path_of("v1", "locks", name, "acquire"), _lease, body, wait=wait_ms / 1000)


def _add_shared_owner(body: dict[str, Any], shared_owner: Optional[str]) -> None:
    """A shared lease is renewed and released as its owner's: holders
    granted in one entry share a token."""
    if shared_owner is not None:
        body["mode"] = "shared"
        body["owner"] = shared_owner


def renew(
    name: str,
    token: int,
    ttl_ms: Optional[int] = None,
    request_id: Optional[str] = None,
    *,
    shared_owner: Optional[str] = None,
) -> Call[Lease]:
    body: dict[str, Any] = {"token": token, "request_id": request_id or new_request_id()}
    if ttl_ms is not None:
        body["ttl_ms"] = ttl_ms
    _add_shared_owner(body, shared_owner)
    return Call("POST", path_of("v1", "locks", name, "renew"), _lease, body)


def release(
    name: str,
    token: int,
    request_id: Optional[str] = None,
    *,
    session: Optional[int] = None,
    seq: Optional[int] = None,
    shared_owner: Optional[str] = None,
) -> Call[Released]:
    body: dict[str, Any] = {"token": token, "request_id": request_id or new_request_id()}
    _add_session(body, session, seq)
    _add_shared_owner(body, shared_owner)
    return Call(
        "POST",
        path_of("v1", "locks", name, "release"),
        lambda d, _s: Released.from_json(_dict(d)),
        body,
    )


def _permits(data: Any, sent_at: float) -> Permits:
    return Permits.from_json(_dict(data), sent_at)


def acquire_permits(
    name: str,
    owner: str,
    limit: int,
    permits: int,
    ttl_ms: Optional[int],
    wait_ms: int = 0,
    request_id: Optional[str] = None,
    *,
    session: Optional[int] = None,
    seq: Optional[int] = None,
) -> Call[Permits]:
    body: dict[str, Any] = {
        "owner": owner,
        "limit": limit,
        "permits": permits,
        "request_id": request_id or new_request_id(),
    }
    _add_lifetime(body, ttl_ms, session, seq)
    if wait_ms:
        body["wait_ms"] = wait_ms
    path = path_of("v1", "semaphores", name, "acquire")
    return Call("POST", path, _permits, body, wait=wait_ms / 1000)


def renew_permits(
    name: str,
    owner: str,
    token: int,
    ttl_ms: Optional[int] = None,
    request_id: Optional[str] = None,
) -> Call[Permits]:
    body: dict[str, Any] = {
        "owner": owner,
        "token": token,
        "request_id": request_id or new_request_id(),
    }
    if ttl_ms is not None:
        body["ttl_ms"] = ttl_ms
    return Call("POST", path_of("v1", "semaphores", name, "renew"), _permits, body)


def release_permits(
    name: str, owner: str, token: int, request_id: Optional[str] = None
) -> Call[dict[str, Any]]:
    body: dict[str, Any] = {
        "owner": owner,
        "token": token,
        "request_id": request_id or new_request_id(),
    }
    return Call("POST", path_of("v1", "semaphores", name, "release"), lambda d, _s: _dict(d), body)


def get_semaphore(name: str) -> Call[Optional[dict[str, Any]]]:
    """The semaphore as the API answers it (limit, in_use, holders, waiters)."""
    return Call(
        "GET", path_of("v1", "semaphores", name), lambda d, _s: _dict(d), none_on=NoSemaphore
    )


def lock_names(names: Sequence[str]) -> list[str]:
    """The list of lock names of a multi-lock call. One string is refused:
    it is a sequence too, and would ask for a lock per character."""
    if isinstance(names, str):
        raise client_side(
            InvalidArgument(
                f"names must be a list of lock names, not the string {names!r}",
                details={"field": "names"},
            )
        )
    return list(names)


def acquire_many(
    names: Sequence[str],
    owner: str,
    ttl_ms: Optional[int],
    wait_ms: int = 0,
    request_id: Optional[str] = None,
    lock_delay_ms: int = 0,
    *,
    session: Optional[int] = None,
    seq: Optional[int] = None,
) -> Call[Leases]:
    body: dict[str, Any] = {
        "names": lock_names(names),
        "owner": owner,
        "request_id": request_id or new_request_id(),
    }
    _add_lifetime(body, ttl_ms, session, seq)
    _add_wait_and_delay(body, wait_ms, lock_delay_ms)
    return Call(
        "POST",
        "/v1/multi/acquire",
        lambda d, sent: Leases.from_json(_dict(d), sent),
        body,
        wait=wait_ms / 1000,
    )


def release_many(
    names: Sequence[str],
    token: int,
    request_id: Optional[str] = None,
    *,
    session: Optional[int] = None,
    seq: Optional[int] = None,
) -> Call[ReleasedMany]:
    body: dict[str, Any] = {
        "names": lock_names(names),
        "token": token,
        "request_id": request_id or new_request_id(),
    }
    _add_session(body, session, seq)
    return Call(
        "POST", "/v1/multi/release", lambda d, _s: ReleasedMany.from_json(_dict(d)), body
    )  # fmt: skip


def get(name: str) -> Call[Optional[LeaseView]]:
    return Call(
        "GET",
        path_of("v1", "locks", name),
        lambda d, _s: LeaseView.from_json(_dict(d)),
        none_on=NotHeld,
    )


def list_locks(prefix: str = "", limit: int = 100) -> Call[list[LeaseView]]:
    def decode(data: Any, _sent: float) -> list[LeaseView]:
        locks = _dict(data).get("locks")
        if not isinstance(locks, list):
            raise DecodeError(f"no locks in {data!r}")
        return [LeaseView.from_json(_dict(item)) for item in locks]

    query = {"prefix": prefix, "limit": str(limit)}
    return Call("GET", "/v1/locks", decode, query=query)


def _session_view(data: Any, sent_at: float) -> SessionView:
    return SessionView.from_json(_dict(data), sent_at)


def _session_path(session: int, *rest: str) -> str:
    if isinstance(session, bool) or not isinstance(session, int) or session <= 0:
        raise _refused(f"a session id is a positive integer, not {session!r}", "session")
    return path_of("v1", "sessions", str(session), *rest)


def create_session(owner: str, ttl_ms: int, request_id: Optional[str] = None) -> Call[SessionView]:
    body = {"owner": owner, "ttl_ms": ttl_ms, "request_id": request_id or new_request_id()}
    return Call("POST", "/v1/sessions", _session_view, body)


def keepalive(
    session: int,
    ttl_ms: Optional[int] = None,
    request_id: Optional[str] = None,
    seq: Optional[int] = None,
) -> Call[SessionView]:
    body: dict[str, Any] = {"request_id": request_id or new_request_id()}
    if ttl_ms is not None:
        body["ttl_ms"] = ttl_ms
    if seq is not None:
        body["seq"] = seq
    return Call("POST", _session_path(session, "keepalive"), _session_view, body)


def delete_session(session: int, request_id: Optional[str] = None) -> Call[SessionDeleted]:
    # A request id, like every mutation: a retry after a lost answer (the
    # session already deleted) gets the first answer again, not a 404.
    query = {"request_id": request_id or new_request_id()}

    def decode(data: Any, _sent_at: float) -> SessionDeleted:
        return SessionDeleted.from_json(_dict(data))

    return Call("DELETE", _session_path(session), decode, query=query)


def get_session(session: int) -> Call[Optional[SessionView]]:
    return Call("GET", _session_path(session), _session_view, none_on=SessionNotFound)


def list_sessions(after: int = 0, limit: int = 100) -> Call[list[SessionView]]:
    def decode(data: Any, sent_at: float) -> list[SessionView]:
        sessions = _dict(data).get("sessions")
        if not isinstance(sessions, list):
            raise DecodeError(f"no sessions in {data!r}")
        return [SessionView.from_json(_dict(item), sent_at) for item in sessions]

    query = {"after": str(after), "limit": str(limit)}
    return Call("GET", "/v1/sessions", decode, query=query)


def check(lock: str, token: int) -> Call[CheckResult]:
    body = {"lock": lock, "token": token}
    return Call(
        "POST", "/v1/fence/check", lambda d, _s: CheckResult.from_json(_dict(d)), body
    )  # fmt: skip


def put_record(
    key: str, lock: str, token: int, value: Any, request_id: Optional[str] = None
) -> Call[RecordWritten]:
    body = {
        "lock": lock,
        "token": token,
        "value": value,
        "request_id": request_id or new_request_id(),
    }
    return Call(
        "PUT",
        path_of("v1", "records", key),
        lambda d, _s: RecordWritten.from_json(_dict(d)),
        body,
    )


def get_record(key: str) -> Call[Optional[Record]]:
    return Call(
        "GET",
        path_of("v1", "records", key),
        lambda d, _s: Record.from_json(_dict(d)),
        none_on=NoRecord,
    )


def gate(
    resource: str, lock: str, token: int, request_id: Optional[str] = None
) -> Call[GateResult]:
    body = {"lock": lock, "token": token, "request_id": request_id or new_request_id()}
    return Call(
        "POST",
        path_of("v1", "fence", "gate", resource),
        lambda d, _s: GateResult.from_json(_dict(d)),
        body,
    )


def _leader(data: Any, sent_at: float) -> Leader:
    return Leader.from_json(_dict(data), sent_at)


def campaign(
    name: str,
    candidate: str,
    value: Any,
    ttl_ms: int,
    wait_ms: int = 0,
    request_id: Optional[str] = None,
) -> Call[Leader]:
    body: dict[str, Any] = {
        "candidate": candidate,
        "value": value,
        "ttl_ms": ttl_ms,
        "request_id": request_id or new_request_id(),
    }
    _add_wait_and_delay(body, wait_ms, 0)
    path = path_of("v1", "elections", name, "campaign")
    return Call("POST", path, _leader, body, wait=wait_ms / 1000)


def proclaim(name: str, candidate: str, token: int, value: Any) -> Call[Leader]:
    body = {"candidate": candidate, "token": token, "value": value, "request_id": new_request_id()}
    return Call("POST", path_of("v1", "elections", name, "proclaim"), _leader, body)


def resign(name: str, candidate: str, token: int) -> Call[Released]:
    body = {"candidate": candidate, "token": token, "request_id": new_request_id()}

    def decode(data: Any, _sent: float) -> Released:
        answer = _dict(data)
        return Released.from_json({**answer, "released": answer.get("resigned")})

    return Call("POST", path_of("v1", "elections", name, "resign"), decode, body)


def leader(name: str) -> Call[Optional[Leader]]:
    return Call("GET", path_of("v1", "elections", name), _leader, none_on=NoLeader)


def observe_path(name: str) -> str:
    """The event stream of election ``name``'s leadership changes."""
    return path_of("v1", "elections", name, "observe")


def status() -> Call[dict[str, Any]]:
    return Call("GET", "/v1/cluster/status", lambda d, _s: _dict(d))


def add_learner(node_id: int, addr: str) -> Call[int]:
    body = {"id": node_id, "addr": addr}
    return Call("POST", "/v1/cluster/learners", _log_index, body, wait=MEMBERSHIP_WAIT)


def promote(node_id: int) -> Call[int]:
    path = path_of("v1", "cluster", "members", str(node_id), "promote")
    return Call("POST", path, _log_index, wait=MEMBERSHIP_WAIT)


def remove_member(node_id: int) -> Call[int]:
    path = path_of("v1", "cluster", "members", str(node_id))
    return Call("DELETE", path, _log_index, wait=MEMBERSHIP_WAIT)


def raw(
    method: str,
    path: str,
    body: Optional[dict[str, Any]] = None,
    query: Optional[Mapping[str, str]] = None,
    wait: float = 0.0,
) -> Call[Any]:
    if not path.startswith("/"):
        path = "/" + path
    return Call(method.upper(), path, _raw, body, query, wait=wait)


def seconds_to_ms(seconds: Optional[float], what: str) -> int:
    return 0 if seconds is None else to_ms(seconds, what)


def optional_ms(seconds: Optional[float], what: str) -> Optional[int]:
    """``None`` stays "not given" (a field left out); else whole ms."""
    return None if seconds is None else to_ms(seconds, what)
