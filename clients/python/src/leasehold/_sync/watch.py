# Generated from src/leasehold/_async/watch.py by scripts/generate_sync.py (unasync):
# do not edit. Edit the asyncio source and run that script instead.
"""Event streams that resume: :class:`~leasehold.watch.AsyncWatch` is written
in ``leasehold/_async/watch.py``, ``Watch`` generated from it into
``leasehold/_sync/watch.py`` (see :mod:`leasehold._async`).

Every node tells the same events under the same ids (the entry index, or
``INDEX.ORDINAL`` for all but an entry's last event), so when a stream
breaks (its node died or restarted) the watch reconnects to the leader it
knows, or the next node, and asks to resume right after the last id it
handed out: no event is missed and none comes twice. A node that no longer
keeps events that old answers ``410 compacted``: iterating raises
:class:`~leasehold.errors.Compacted`, and the caller re-reads the state and
watches again after the index of that read."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Optional

import httpx

from leasehold._core import INITIAL_BACKOFF, MAX_BACKOFF, Retry, sleep, unreachable, untrusted
from leasehold.errors import Compacted, DecodeError
from leasehold.types import WatchEvent

if TYPE_CHECKING:
    from .client import Client

#: Longest silence before a stream counts as dead: the nodes send a
#: keep-alive every 15 s.
READ_TIMEOUT = 35.0


class Watch:
    """An event stream to iterate over (``async for`` for the asyncio
    flavour): :class:`~leasehold.types.WatchEvent` after
    :class:`~leasehold.types.WatchEvent`, in log order, for as long as the
    loop runs. :attr:`after` is the id of the last event handed out."""

    def __init__(
        self,
        client: Client,
        path: str,
        prefix: Optional[str] = None,
        after: Optional[str] = None,
    ) -> None:
        self._client = client
        self._path = path
        self._prefix = prefix
        self.after = after

    def __iter__(self) -> Any:
        return self._events()

    def _params(self) -> dict[str, str]:
        params = {}
        if self._prefix is not None:
            params["prefix"] = self._prefix
        if self.after is not None:
            params["after"] = self.after
        return params

    def _events(self) -> Any:
        core = self._client._core
        timeout = httpx.Timeout(core.timeout, read=READ_TIMEOUT)
        give_up = time.monotonic() + core.retry_budget
        backoff = INITIAL_BACKOFF
        while True:
            index = core.preferred()
            url = core.url(index, self._path)
            retry: Optional[Retry] = None
            try:
                with self._client._http.stream(
                    "GET", url, params=self._params(), headers=core.headers(), timeout=timeout
                ) as response:
                    if response.status_code == 200:
                        for event in _frames(response):
                            self.after = event.id
                            give_up = time.monotonic() + core.retry_budget
                            backoff = INITIAL_BACKOFF
                            yield event
                        failure = unreachable(core.endpoints[index], EOFError("stream ended"))
                    else:
                        retry = _refusal(core.outcome(index, response, response.read()))
                        failure = retry.error
            except httpx.TransportError as e:
                failure = unreachable(core.endpoints[index], e)
                if untrusted(e):
                    raise failure from e
                core.move_on_from(index)
            # The stream broke, or was refused for now: resume after the
            # last event handed out, on the next node if this one is gone.
            delay = core.next_delay(retry, backoff)
            if time.monotonic() + delay > give_up:
                raise failure
            sleep(delay)
            backoff = min(backoff * 2, MAX_BACKOFF)


def _frames(response: httpx.Response) -> Any:
    """The events of a stream's SSE frames, as they come."""
    frame: list[str] = []
    for line in response.iter_lines():
        if line:
            frame.append(line)
            continue
        event = _event(frame)
        frame = []
        if event is not None:
            yield event


def _refusal(outcome: Any) -> Retry:
    """A refusal to open a stream that is worth retrying (a 503); any other
    error was raised by ``Core.outcome``."""
    if not isinstance(outcome, Retry):
        raise DecodeError(f"a stream opened without a stream: {outcome!r}")
    return outcome


def _event(lines: list[str]) -> Optional[WatchEvent]:
    """The event of one SSE frame; ``None`` for a keep-alive; raises
    :class:`~leasehold.errors.Compacted` for the frame that ends a stream
    that fell behind the node's history."""
    fields: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name in ("event", "id", "data"):
            fields[name] = fields.get(name, "") + value.lstrip(" ")
    if fields.get("event") == "compacted":
        data = _json(fields.get("data", "{}"))
        raise Compacted("the stream fell behind the node's event history", details=data, status=410)
    if "id" not in fields or "data" not in fields:
        return None
    return WatchEvent.from_json(fields["id"], _json(fields["data"]))


def _json(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as e:
        raise DecodeError(f"an event is not JSON: {text!r}") from e
    if not isinstance(data, dict):
        raise DecodeError(f"an event is not a JSON object: {text!r}")
    return data
