"""Exceptions: one class per error code of the leasehold HTTP API.

Every error the cluster answers is ``{"error": {"code", "message", ...details}}``.
The client raises the class registered for ``code`` (all under
:class:`LeaseholdError`); details become attributes. A code this version does
not know raises :class:`LeaseholdError` itself, with ``code`` and ``body`` set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, TypeVar

_T = TypeVar("_T")


class LeaseholdError(Exception):
    """Base of every error this package raises.

    ``status`` is the HTTP status (``None`` for errors raised by the client
    itself, e.g. no node reachable), ``code`` the API's error code,
    ``details`` the other fields of the error object, ``body`` the whole
    decoded answer.
    """

    code: Optional[str] = None
    status: Optional[int] = None
    message: str
    details: dict[str, Any]
    body: dict[str, Any]

    def __init__(
        self,
        message: str = "",
        *,
        status: Optional[int] = None,
        code: Optional[str] = None,
        details: Optional[dict[str, Any]] = None,
        body: Optional[dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code
        self.details = dict(details or {})
        self.body = dict(body or {})

    def __str__(self) -> str:
        prefix = " ".join(str(p) for p in (self.status, self.code) if p is not None)
        return f"{prefix}: {self.message}" if prefix else self.message

    def _detail(self, key: str) -> Any:
        return self.details.get(key)


class ApiError(LeaseholdError):
    """An error answered by the cluster (has ``status`` and ``code``)."""


_BY_CODE: dict[str, type[ApiError]] = {}


def _register(cls: type[ApiError]) -> type[ApiError]:
    assert cls.code is not None
    _BY_CODE[cls.code] = cls
    return cls


# --- 400 ---------------------------------------------------------------------


@_register
class InvalidArgument(ApiError):
    """400: a limit is violated, bad JSON, unknown/missing field, wrong type.

    ``field`` names the culprit when known. Also raised by the client itself
    (``status`` ``None``) for arguments it refuses before sending anything.
    """

    code = "invalid_argument"
    status = 400

    @property
    def field(self) -> Optional[str]:
        value = self._detail("field")
        return str(value) if value is not None else None


@_register
class TlsRequired(ApiError):
    """400: plain http to a node that serves https only."""

    code = "tls_required"
    status = 400


# --- 401 / 403 -----------------------------------------------------------------


@_register
class Unauthorized(ApiError):
    """401 ``unauthenticated``: no bearer token where auth is on."""

    code = "unauthenticated"
    status = 401


Unauthenticated = Unauthorized


@_register
class Forbidden(ApiError):
    """403 ``permission_denied``: the token does not open this part of the API,
    or its user lacks ``permission`` on ``name`` (a lock name, or a list's
    prefix; both ``None`` when the token opens nothing here)."""

    code = "permission_denied"
    status = 403

    @property
    def permission(self) -> Optional[str]:
        """``read``, ``lock``, ``fence`` or ``admin``: what the user lacks."""
        value = self._detail("permission")
        return str(value) if value is not None else None

    @property
    def name(self) -> Optional[str]:
        """The first name of the request the user lacks it on."""
        value = self._detail("name")
        return str(value) if value is not None else None


PermissionDenied = Forbidden


# --- 404 ---------------------------------------------------------------------


@_register
class NotHeld(ApiError):
    """404: renew, release or get of a lock that is free."""

    code = "not_held"
    status = 404

    @property
    def name(self) -> Optional[str]:
        return self._detail("name")  # type: ignore[no-any-return]


@_register
class NotFound(ApiError):
    """404: no such endpoint."""

    code = "not_found"
    status = 404


@_register
class NoLeader(ApiError):
    """404: an election nobody leads (``name``, ``index``: the log index the
    read reflects)."""

    code = "no_leader"
    status = 404


@_register
class Compacted(ApiError):
    """410: an event stream asked to resume further back than the node's
    event history keeps (or that fell that far behind): re-read the state,
    then watch again after the index of that read."""

    code = "compacted"
    status = 410

    @property
    def compacted_before(self) -> Optional[int]:
        return self._detail("compacted_before")  # type: ignore[no-any-return]


@_register
class NoRecord(ApiError):
    """404: a record key never written."""

    code = "no_record"
    status = 404

    @property
    def key(self) -> Optional[str]:
        return self._detail("key")  # type: ignore[no-any-return]


@_register
class NotMember(ApiError):
    """404: promote or remove of a node that is not a member."""

    code = "not_member"
    status = 404

    @property
    def id(self) -> Optional[int]:
        return self._detail("id")  # type: ignore[no-any-return]


@_register
class NoSnapshot(ApiError):
    """404: the node has taken no snapshot yet."""

    code = "no_snapshot"
    status = 404


# --- 405 / 408 / 413 / 415 -----------------------------------------------------


@_register
class MethodNotAllowed(ApiError):
    """405: wrong method for the path."""

    code = "method_not_allowed"
    status = 405


@_register
class RequestTimeout(ApiError):
    """408: the request was not received and answered within the node's
    ``--request-timeout-ms``. A write may still take effect."""

    code = "request_timeout"
    status = 408


@_register
class BodyTooLarge(ApiError):
    """413: the request body is over 64 KiB."""

    code = "body_too_large"
    status = 413


@_register
class UnsupportedMediaType(ApiError):
    """415: the body is not ``application/json``."""

    code = "unsupported_media_type"
    status = 415


# --- 409 ---------------------------------------------------------------------


@dataclass(frozen=True)
class Conflict:
    """One lock of a multi-acquire that cannot be granted now, and why: an
    element of :attr:`HeldByOther.conflicts`.

    ``reason`` is ``"held"`` (another owner holds it: ``holder``, ``token``,
    ``expires_in_ms``), ``"delayed"`` (free, but the lock delay of an expired
    lease runs until tick ``delayed_until_tick``) or ``"reserved"`` (free,
    but kept for ``first_waiter``, a multi-acquire first in its queue). The
    fields of the other reasons are ``None``.
    """

    name: str
    reason: str
    holder: Optional[str] = None
    token: Optional[int] = None
    expires_in_ms: Optional[int] = None
    delayed_until_tick: Optional[int] = None
    first_waiter: Optional[str] = None


def _typed(item: dict[str, Any], key: str, kind: type[_T]) -> Optional[_T]:
    value = item.get(key)
    if isinstance(value, bool) and kind is not bool:
        return None
    return value if isinstance(value, kind) else None


def _conflicts(value: Any) -> list[Conflict]:
    """The ``conflicts`` detail, leaving out entries without a ``name`` and a
    ``reason`` (a field of the wrong type reads as ``None``): the error is
    raised either way, and it should not turn into a decoding error."""
    if not isinstance(value, list):
        return []
    conflicts = []
    for item in value:
        if not isinstance(item, dict):
            continue
        name, reason = _typed(item, "name", str), _typed(item, "reason", str)
        if name is None or reason is None:
            continue
        conflicts.append(
            Conflict(
                name=name,
                reason=reason,
                holder=_typed(item, "holder", str),
                token=_typed(item, "token", int),
                expires_in_ms=_typed(item, "expires_in_ms", int),
                delayed_until_tick=_typed(item, "delayed_until_tick", int),
                first_waiter=_typed(item, "first_waiter", str),
            )
        )
    return conflicts


@_register
class HeldByOther(ApiError):
    """409 ``held``: another owner holds the lock (``holder``, ``token``,
    ``expires_in_ms``). From a multi-acquire, some of its locks cannot be
    granted now: ``conflicts`` names each of them and what is in the way
    (the single-lock attributes are ``None`` then)."""

    code = "held"
    status = 409

    @property
    def conflicts(self) -> list[Conflict]:
        """Every lock of a refused multi-acquire that could not be granted,
        in the order asked; empty for a single acquire."""
        return _conflicts(self._detail("conflicts"))

    @property
    def name(self) -> Optional[str]:
        return self._detail("name")  # type: ignore[no-any-return]

    @property
    def holder(self) -> Optional[str]:
        return self._detail("holder")  # type: ignore[no-any-return]

    @property
    def token(self) -> Optional[int]:
        return self._detail("token")  # type: ignore[no-any-return]

    @property
    def expires_in_ms(self) -> Optional[int]:
        return self._detail("expires_in_ms")  # type: ignore[no-any-return]


@_register
class StaleToken(ApiError):
    """409: the token is not the current one.

    For renew, release and fenced records ``current_token`` is the lock's
    current token (``None`` when it is free); for a gate ``highest`` is the
    highest token it admitted. ``token`` is the token that was refused.
    """

    code = "stale_token"
    status = 409

    @property
    def token(self) -> Optional[int]:
        return self._detail("token")  # type: ignore[no-any-return]

    @property
    def current_token(self) -> Optional[int]:
        return self._detail("current_token")  # type: ignore[no-any-return]

    @property
    def highest(self) -> Optional[int]:
        return self._detail("highest")  # type: ignore[no-any-return]


@_register
class LockMismatch(ApiError):
    """409: a gate asked with another lock's token (``lock`` is the gate's)."""

    code = "lock_mismatch"
    status = 409

    @property
    def resource(self) -> Optional[str]:
        return self._detail("resource")  # type: ignore[no-any-return]

    @property
    def lock(self) -> Optional[str]:
        return self._detail("lock")  # type: ignore[no-any-return]


@_register
class LockDelayed(ApiError):
    """409: the lock is free, but its last lease expired with a lock delay
    that runs until tick ``delayed_until_tick``."""

    code = "lock_delayed"
    status = 409

    @property
    def name(self) -> Optional[str]:
        return self._detail("name")  # type: ignore[no-any-return]

    @property
    def delayed_until_tick(self) -> Optional[int]:
        return self._detail("delayed_until_tick")  # type: ignore[no-any-return]


@_register
class Reserved(ApiError):
    """409: the lock is free, but kept for ``first_waiter``, a multi-acquire
    first in its queue that waits for its other locks."""

    code = "reserved"
    status = 409

    @property
    def name(self) -> Optional[str]:
        return self._detail("name")  # type: ignore[no-any-return]

    @property
    def first_waiter(self) -> Optional[str]:
        return self._detail("first_waiter")  # type: ignore[no-any-return]


@_register
class SessionNotFound(ApiError):
    """404: no live session with this id (expired, deleted, or never created)."""

    code = "session_not_found"
    status = 404

    @property
    def session(self) -> Optional[int]:
        return self._detail("session")  # type: ignore[no-any-return]


@_register
class HeldUnderSession(ApiError):
    """409: a renew of a lock held under a session; keep the session alive instead."""

    code = "held_under_session"
    status = 409

    @property
    def session(self) -> Optional[int]:
        return self._detail("session")  # type: ignore[no-any-return]


@_register
class SeqTooOld(ApiError):
    """409: a session request's ``seq`` is older than the answers the session
    remembers (``oldest``); it was not applied again."""

    code = "seq_too_old"
    status = 409

    @property
    def oldest(self) -> Optional[int]:
        return self._detail("oldest")  # type: ignore[no-any-return]


@_register
class WaitTimeout(ApiError):
    """409: a waiting acquire's wait ran out before the lock passed to it."""

    code = "wait_timeout"
    status = 409


@_register
class RequestIdReused(ApiError):
    """409: the request id was already used for another lock or operation."""

    code = "request_id_reused"
    status = 409

    @property
    def request_id(self) -> Optional[str]:
        return self._detail("request_id")  # type: ignore[no-any-return]


@_register
class WouldLoseQuorum(ApiError):
    """409: a membership change after which the new voters could not form a
    quorum now (``reachable``, ``needed``)."""

    code = "would_lose_quorum"
    status = 409


@_register
class AlreadyInitialized(ApiError):
    """409: ``POST /v1/cluster/init`` on an initialized node."""

    code = "already_initialized"
    status = 409


# --- 5xx ---------------------------------------------------------------------


@_register
class InternalError(ApiError):
    """500: a fault of the server (logged there)."""

    code = "internal"
    status = 500


@_register
class NoSemaphore(ApiError):
    """404: nobody holds or waits for a permit of this semaphore."""

    code = "no_semaphore"
    status = 404


@_register
class NoUser(ApiError):
    """404: no such user (``user``)."""

    code = "no_user"
    status = 404


@_register
class NoRole(ApiError):
    """404: no such role (``role``)."""

    code = "no_role"
    status = 404


@_register
class NoToken(ApiError):
    """404: the user has no token with this id (``user``, ``token_id``)."""

    code = "no_token"
    status = 404


@_register
class AlreadyExists(ApiError):
    """409: a user or role of that name exists already (``what``, ``name``)."""

    code = "already_exists"
    status = 409


@_register
class Deadlock(ApiError):
    """409: waiting would close a cycle of owners each waiting for the next;
    refused at once. ``cycle``: the asking owner first, the last waits for
    the first."""

    code = "deadlock"
    status = 409

    @property
    def cycle(self) -> Optional[list[str]]:
        return self._detail("cycle")  # type: ignore[no-any-return]


@_register
class SemaphoreFull(ApiError):
    """409: too few permits of the semaphore are free (or others wait first)
    and the acquire did not wait (``limit``, ``in_use``, ``holders``)."""

    code = "semaphore_full"
    status = 409

    @property
    def holders(self) -> Optional[list[dict[str, Any]]]:
        return self._detail("holders")  # type: ignore[no-any-return]


@_register
class LimitMismatch(ApiError):
    """409: the semaphore lives with another limit (``limit``) than asked."""

    code = "limit_mismatch"
    status = 409

    @property
    def limit(self) -> Optional[int]:
        return self._detail("limit")  # type: ignore[no-any-return]


@_register
class Full(ApiError):
    """507: the record or gate limit is reached (``what``, ``limit``)."""

    code = "full"
    status = 507


@_register
class Unavailable(ApiError):
    """503, or no node gave a usable answer within the retry budget.

    The client retries 503 answers itself; this is raised once its retry
    budget (or the call's deadline) is spent. Raised by the client with
    ``status`` ``None`` when no node could be reached at all.
    """

    code = "unavailable"
    status = 503


@_register
class NotLeader(Unavailable):
    """503: leadership changed while the request was served (retried)."""

    code = "not_leader"


@_register
class Overloaded(Unavailable):
    """503: the node has too many requests in flight (retried)."""

    code = "overloaded"


class DecodeError(LeaseholdError):
    """The answer was not what the API documents (not JSON, missing fields)."""


#: Every API error code and the class raised for it.
ERRORS_BY_CODE: dict[str, type[ApiError]] = dict(_BY_CODE)


def error_from_body(status: int, body: Any) -> ApiError:
    """The exception for an error answer with ``status`` and decoded ``body``."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {}
    code = error.get("code")
    message = str(error.get("message", "")) or f"HTTP {status}"
    details = {k: v for k, v in error.items() if k not in ("code", "message")}
    whole = body if isinstance(body, dict) else {}
    cls = _BY_CODE.get(code) if isinstance(code, str) else None
    if cls is None:
        return ApiError(
            message,
            status=status,
            code=code if isinstance(code, str) else None,
            details=details,
            body=whole,
        )
    return cls(message, status=status, details=details, body=whole)


__all__ = [
    "ERRORS_BY_CODE",
    "AlreadyExists",
    "AlreadyInitialized",
    "ApiError",
    "BodyTooLarge",
    "Conflict",
    "Deadlock",
    "DecodeError",
    "Forbidden",
    "Full",
    "HeldByOther",
    "InternalError",
    "InvalidArgument",
    "LeaseholdError",
    "LimitMismatch",
    "LockDelayed",
    "LockMismatch",
    "MethodNotAllowed",
    "NoRecord",
    "NoRole",
    "NoSemaphore",
    "NoSnapshot",
    "NoToken",
    "NoUser",
    "NotFound",
    "NotHeld",
    "NotLeader",
    "NotMember",
    "Overloaded",
    "PermissionDenied",
    "RequestIdReused",
    "RequestTimeout",
    "Reserved",
    "SemaphoreFull",
    "StaleToken",
    "TlsRequired",
    "Unauthenticated",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
    "WaitTimeout",
    "WouldLoseQuorum",
    "error_from_body",
]
