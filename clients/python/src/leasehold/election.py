"""Elections: a lock whose holder carries a value (see docs/election.md).

A :class:`Leadership` is kept exactly as a :class:`~leasehold.lock.Lock` is
(it is one): the watchdog renews it every ``ttl / 3`` and sets ``lost`` by
the safe deadline; its ``token`` is the index of the entry that elected it,
higher than every earlier leader's. :class:`Election` campaigns, reads the
leader and observes its changes.

The code of :class:`AsyncElection` and :class:`AsyncLeadership` is in
:mod:`leasehold._async.election`; the sync classes are generated from it
(see :mod:`leasehold._async`).
"""

from ._async.election import AsyncElection, AsyncLeadership
from ._sync.election import Election, Leadership

__all__ = ["AsyncElection", "AsyncLeadership", "Election", "Leadership"]
