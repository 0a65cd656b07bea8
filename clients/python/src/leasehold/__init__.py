"""Python client of leasehold, a Raft-replicated lease lock service with
fencing tokens.

>>> from leasehold import Client
>>> client = Client(["127.0.0.1:7701", "127.0.0.1:7702", "127.0.0.1:7703"])
>>> with client.lock("payments:42", ttl=10, wait=30) as lease:  # doctest: +SKIP
...     write_with_token(lease.token)
"""

from ._core import LEADER_ADDR_HEADER, default_owner, new_request_id
from .aio import AsyncClient
from .client import Client
from .errors import (
    ERRORS_BY_CODE,
    AlreadyInitialized,
    ApiError,
    BodyTooLarge,
    DecodeError,
    Forbidden,
    Full,
    HeldByOther,
    InternalError,
    InvalidArgument,
    LeaseholdError,
    LockMismatch,
    MethodNotAllowed,
    NoRecord,
    NoSnapshot,
    NotFound,
    NotHeld,
    NotLeader,
    NotMember,
    Overloaded,
    PermissionDenied,
    RequestIdReused,
    RequestTimeout,
    StaleToken,
    TlsRequired,
    Unauthenticated,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
    WaitTimeout,
    WouldLoseQuorum,
)
from .lock import AsyncLock, Lock, LostReason
from .types import (
    CheckResult,
    GateResult,
    Lease,
    LeaseView,
    Record,
    RecordWritten,
    Released,
    SqlFence,
    Waiter,
    fence_sql,
)

__version__ = "0.1.0"

__all__ = [
    "ERRORS_BY_CODE",
    "LEADER_ADDR_HEADER",
    "AlreadyInitialized",
    "ApiError",
    "AsyncClient",
    "AsyncLock",
    "BodyTooLarge",
    "CheckResult",
    "Client",
    "DecodeError",
    "Forbidden",
    "Full",
    "GateResult",
    "HeldByOther",
    "InternalError",
    "InvalidArgument",
    "Lease",
    "LeaseView",
    "LeaseholdError",
    "Lock",
    "LockMismatch",
    "LostReason",
    "MethodNotAllowed",
    "NoRecord",
    "NoSnapshot",
    "NotFound",
    "NotHeld",
    "NotLeader",
    "NotMember",
    "Overloaded",
    "PermissionDenied",
    "Record",
    "RecordWritten",
    "Released",
    "RequestIdReused",
    "RequestTimeout",
    "SqlFence",
    "StaleToken",
    "TlsRequired",
    "Unauthenticated",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
    "WaitTimeout",
    "Waiter",
    "WouldLoseQuorum",
    "__version__",
    "default_owner",
    "fence_sql",
    "new_request_id",
]
