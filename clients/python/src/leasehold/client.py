"""The synchronous client, generated from the asyncio one: its code is in
:mod:`leasehold._sync.client` (see :mod:`leasehold._async`)."""

from ._sync.client import Client

__all__ = ["Client"]
