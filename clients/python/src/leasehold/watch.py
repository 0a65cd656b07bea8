"""Event streams that resume after the last event on any node (see
:mod:`leasehold._async.watch`); :class:`Watch` is generated from
:class:`AsyncWatch` (see :mod:`leasehold._async`)."""

from ._async.watch import AsyncWatch
from ._sync.watch import Watch

__all__ = ["AsyncWatch", "Watch"]
