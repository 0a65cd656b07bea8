"""The asyncio client: the same API as :class:`leasehold.Client`, awaited. Its
code is in :mod:`leasehold._async.client`, the source of the sync client's."""

from ._async.client import AsyncClient

__all__ = ["AsyncClient"]
