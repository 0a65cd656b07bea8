"""The asyncio flavour of the client and its guards, the one source of both
flavours: ``scripts/generate_sync.py`` turns each module here into its
namesake in :mod:`leasehold._sync` with unasync (``async def`` to ``def``,
``await`` dropped, ``async with`` to ``with``, ``AsyncClient`` to ``Client``,
``TaskWatchdog`` to ``ThreadWatchdog``, ...), and ``run-tests.sh`` fails
while the committed sync modules are not what it would write.

So the code here may only differ from its sync twin by such names: whatever
the flavours do differently beyond that lives in shared modules, both ways,
under names a token apart (the two watchdogs of :mod:`leasehold._watchdog`,
``asleep`` and ``sleep`` in :mod:`leasehold._core`), and whatever they do
alike but needs no awaiting lives there once (:mod:`leasehold._guards`,
:mod:`leasehold._core`, :mod:`leasehold._calls`). Docstrings and comments
are copied as they are, so they are worded for both flavours. Imports of
the rest of the package are absolute, imports within the flavour relative,
so the generated modules import their own flavour.
"""
