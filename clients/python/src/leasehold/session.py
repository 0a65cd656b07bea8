"""Sessions: any number of locks kept alive by one session, whose watchdog
sends one keepalive every ``ttl / 3`` whatever it holds, and whose one
``lost`` speaks for all of them (the Rust client's ``Session``).

The timing is the watchdog's, shared with :class:`~leasehold.Lock` (see
:mod:`leasehold._watchdog`): the session, and so every lock under it, is
safe until the start of the last successful keepalive (or of the create) +
ttl - drift margin, :meth:`Session.valid_until`. A lock acquired under the
session later, even after a long wait in its queue, is safe exactly as long
as the session: the cluster ends it only with the session, and the acquire
restarts no deadline. So the deadline of a lock under a session is the
session's, never its acquire's: the :class:`Lease` that :meth:`Session.lock`
(or :meth:`Session.lock_many`) answers is anchored where the session was
when it was granted (its ``sent_at`` is the start of the last successful
keepalive, or of the create), and :meth:`Session.valid_until` moves on with
every later keepalive. A keepalive (or
an acquire) answered ``session_not_found`` means the session has ended and
its locks are gone: ``lost`` is set at once.

Every acquire and keepalive of a session carries the next number of the
session's sequence (``seq``: 1, 2, 3, ...), the same on each retry of one
call: the cluster answers a retry it has already applied from the session's
memory, for the session's whole life, not only while its request id is
remembered.

The code of :class:`AsyncSession` is in :mod:`leasehold._async.session`;
:class:`Session` is generated from it (see :mod:`leasehold._async`).
"""

from ._async.session import AsyncSession
from ._sync.session import Session

__all__ = ["AsyncSession", "Session"]
