"""Held permits of a counting semaphore: :class:`Semaphore` (and
:class:`AsyncSemaphore`) keep them with the watchdog of a lock guard (see
:mod:`leasehold.lock` for the timing): renewed every ``ttl / 3``, ``lost``
set no later than the safe deadline, returned on leaving the block.

The code of :class:`AsyncSemaphore` is in :mod:`leasehold._async.semaphore`;
:class:`Semaphore` is generated from it (see :mod:`leasehold._async`).
"""

from ._async.semaphore import AsyncSemaphore
from ._sync.semaphore import Semaphore

__all__ = ["AsyncSemaphore", "Semaphore"]
