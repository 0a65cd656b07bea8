"""Held locks: a lease kept alive by a watchdog, and the moment it is lost.

Timing (the same as the Rust client's ``Lock``, and as :class:`Session`'s):
the lease is certainly still held until :meth:`Lock.valid_until`, the start
of the call that produced the last grant or renewal + ttl - drift margin.
The watchdog renews every ``ttl / 3`` and sets ``lost`` no later than that
deadline when it cannot renew; a renewal answered ``stale_token`` or
``not_held`` means the lease has ended on the cluster: ``lost`` is set at
once. The whole contract is in :mod:`leasehold._watchdog`.

:class:`ReadLock` holds a lock in shared mode (readers together, a writer
excludes them) and :class:`WriteLock` exclusively, each a :class:`Lock`.

The code of :class:`AsyncLock` is in :mod:`leasehold._async.lock`; :class:`Lock`
is generated from it (see :mod:`leasehold._async`).
"""

from ._async.lock import AsyncLock, AsyncReadLock, AsyncWriteLock
from ._sync.lock import Lock, ReadLock, WriteLock
from ._watchdog import INITIAL_BACKOFF, MAX_BACKOFF, LostReason

__all__ = [
    "INITIAL_BACKOFF",
    "MAX_BACKOFF",
    "AsyncLock",
    "AsyncReadLock",
    "AsyncWriteLock",
    "Lock",
    "LostReason",
    "ReadLock",
    "WriteLock",
]
