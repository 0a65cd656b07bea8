"""The sync flavour of the client and its guards. Every module here but this
one is generated from its namesake in :mod:`leasehold._async` by
``scripts/generate_sync.py``: edit the asyncio source, then run it."""
