"""Several locks held together: :class:`LockSet` takes every lock of a list in
one multi-acquire, under one fencing token, and releases them together.

Unlike :class:`~leasehold.lock.Lock` there is no watchdog (as with the Rust
client's ``LockSet``): nothing renews the leases, so a set is for work that
fits in its ttl. Check :meth:`LockSet.valid_until` (or :meth:`remaining`)
before each action, and pass :attr:`token` with every write: once the ttl has
run out another owner may hold any of the locks.

The code of :class:`AsyncLockSet` is in :mod:`leasehold._async.multi`;
:class:`LockSet` is generated from it (see :mod:`leasehold._async`).
"""

from ._async.multi import AsyncLockSet
from ._sync.multi import LockSet

__all__ = ["AsyncLockSet", "LockSet"]
