"""What the sync and async clients share: endpoints, leader following, request
ids, retry decisions, answer bounds and decoding. No I/O happens here."""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import json
import os
import random
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union
from urllib.parse import quote

import httpx

from .errors import (
    ApiError,
    DecodeError,
    InvalidArgument,
    LeaseholdError,
    Unavailable,
    error_from_body,
)

#: Names the leader in every answer a node forwarded (or served as leader).
LEADER_ADDR_HEADER = "x-leasehold-leader-addr"
LEADER_HEADER = "x-leasehold-leader"

DEFAULT_TIMEOUT = 6.0
DEFAULT_RETRY_BUDGET = 10.0
#: Membership changes (a learner catching up) may take longer than a request.
MEMBERSHIP_WAIT = 60.0
INITIAL_BACKOFF = 0.025
MAX_BACKOFF = 0.5
#: Retry-After values above this are treated as this (seconds).
MAX_RETRY_AFTER = 30.0
#: Extra random delay on top of Retry-After, as a fraction of it.
RETRY_AFTER_JITTER = 0.2
#: The longest answer body read, as the Rust client's ``http::MAX_ANSWER_BYTES``:
#: the longest legitimate answers are lists (at most 1000 locks or sessions
#: of a few hundred bytes each) and a lock with its queue (about 100 bytes a
#: waiter), so this leaves room for some 600 000 waiters. httpx reads a body
#: whole, however long, unless it is streamed: the client streams every
#: answer and stops here, so no node can make it allocate without end.
MAX_ANSWER_BYTES = 64 << 20

_STARTED_NS = time.time_ns()
_COUNTER = itertools.count()


def new_request_id() -> str:
    """A request id unique to this process run: pid, the start time of this
    module (ns) and a per-process counter, in hex, as the Rust client does."""
    return f"{os.getpid():x}-{_STARTED_NS:x}-{next(_COUNTER):x}"


def default_owner() -> str:
    """A fresh owner id, ``hostname-pid-random``, different for every call."""
    host = "".join(c for c in socket.gethostname() if c.isascii() and c.isprintable())
    host = host.replace(" ", "")[:64] or "host"
    return f"{host}-{os.getpid()}-{random.getrandbits(64):016x}"


def to_ms(seconds: float, what: str) -> int:
    """Seconds as whole milliseconds (rounded), refusing non-numbers."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise client_side(InvalidArgument(f"{what} must be a number of seconds, not {seconds!r}"))
    if seconds != seconds or seconds < 0:
        raise client_side(InvalidArgument(f"{what} must be a non-negative number of seconds"))
    return round(seconds * 1000)


def path_of(*segments: str) -> str:
    """``/seg/seg/..`` with every segment percent-encoded (``/`` too)."""
    return "/" + "/".join(quote(s, safe="") for s in segments)


@dataclass(frozen=True)
class Endpoint:
    base: str
    #: ``host:port`` as a node names the leader in its header.
    addr: str


def parse_endpoints(endpoints: Union[str, Sequence[str]], https: bool) -> list[Endpoint]:
    items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    scheme = "https" if https else "http"
    parsed = []
    for raw in items:
        text = raw.strip()
        if not text:
            continue
        url = httpx.URL(text if "://" in text else f"{scheme}://{text}")
        if url.scheme not in ("http", "https") or not url.host:
            raise client_side(InvalidArgument(f"invalid endpoint {raw!r}"))
        port = url.port or (443 if url.scheme == "https" else 80)
        host = f"[{url.host}]" if ":" in url.host else url.host
        parsed.append(Endpoint(base=f"{url.scheme}://{host}:{port}", addr=f"{host}:{port}"))
    if not parsed:
        raise client_side(InvalidArgument("no endpoints given"))
    return parsed


@dataclass
class Retry:
    """A 503 answer: retry after ``delay`` seconds (``None``: the client's
    own back-off), raising ``error`` once the budget is spent; ``at_once``
    when it named another leader, which may take the next try without a
    pause."""

    error: LeaseholdError
    delay: Optional[float]
    at_once: bool = False


def retry_after(headers: httpx.Headers) -> Optional[float]:
    """The ``Retry-After`` header in seconds (delta-seconds or HTTP-date)."""
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def jittered(delay: float, fraction: float) -> float:
    """``delay`` plus up to ``fraction`` of it at random: never sooner."""
    return delay * (1.0 + random.uniform(0.0, fraction))


def answer_refusal(response: httpx.Response) -> Optional[DecodeError]:
    """Why an answer is refused before its body is read, if it is: a body
    longer than :data:`MAX_ANSWER_BYTES` by its own ``content-length`` (in
    however many digits), or an encoded one: the client asks for none
    (``accept-encoding: identity``), and a decoder can turn a small body into
    a huge one."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        return DecodeError(
            f"answer of {response.request.url} is {encoding}-encoded, which was not asked for"
        )
    digits = response.headers.get("content-length", "").strip().lstrip("0")
    longest = len(str(MAX_ANSWER_BYTES))
    if (
        digits.isascii()
        and digits.isdigit()
        and (len(digits) > longest or int(digits) > MAX_ANSWER_BYTES)
    ):
        return answer_too_large(response)
    return None


def answer_too_large(response: httpx.Response) -> DecodeError:
    return DecodeError(f"answer of {response.request.url} is longer than {MAX_ANSWER_BYTES} bytes")


def decode_error(status: int, body: bytes) -> ApiError:
    try:
        data = json.loads(body)
    except ValueError:
        data = {}
    return error_from_body(status, data)


def decode_ok(response: httpx.Response, body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as e:
        raise DecodeError(f"answer of {response.request.url} is not JSON: {e}") from e


def ssl_context(
    ca_file: Optional[str], cert: Optional[tuple[str, str]] = None
) -> Union[ssl.SSLContext, bool]:
    """Trust only ``ca_file`` when given; the system store otherwise. With
    ``cert`` (certificate file, key file), present that client certificate:
    loaded here, so a wrong key fails when the client is made."""
    if ca_file is None and cert is None:
        return True
    context = ssl.create_default_context(cafile=None if ca_file is None else os.fspath(ca_file))
    if cert is not None:
        context.load_cert_chain(os.fspath(cert[0]), os.fspath(cert[1]))
    return context


class Core:
    """Endpoints and the leader preference, shared by the threads of a client."""

    def __init__(
        self,
        endpoints: Union[str, Sequence[str]],
        *,
        token: Optional[str],
        ca_file: Optional[str],
        timeout: float,
        retry_budget: float,
    ) -> None:
        self.endpoints = parse_endpoints(endpoints, https=ca_file is not None)
        token = token.strip() if token is not None else None
        if token is not None and not token:
            raise client_side(InvalidArgument("token is empty"))
        self.token = token
        self.timeout = float(timeout)
        self.retry_budget = float(retry_budget)
        self._preferred = 0
        self._mutex = threading.Lock()
        #: Waiting acquires go over HTTP/2 (many on one connection) until a
        #: node shows it does not speak it.
        self.http2 = True

    def waits_over_http2(self, wait: float, probing_http1: bool) -> bool:
        """Whether a call that may wait ``wait`` seconds goes over HTTP/2."""
        return wait > 0 and self.http2 and not probing_http1

    def broke_over_http2(self, error: httpx.TransportError) -> bool:
        """Whether an HTTP/2 attempt broke other than by connect or timeout:
        then the next try, at once, is HTTP/1.1, and if the node answers
        that, it does not speak HTTP/2 (:meth:`answered_over_http1`)."""
        return not isinstance(error, (httpx.ConnectError, httpx.TimeoutException))

    def answered_over_http1(self) -> None:
        """A node answered HTTP/1.1 right after HTTP/2 broke: wait over
        HTTP/1.1 from now on."""
        self.http2 = False

    def headers(self) -> dict[str, str]:
        headers = {"accept": "application/json", "accept-encoding": "identity"}
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        return headers

    def preferred(self) -> int:
        with self._mutex:
            return self._preferred % len(self.endpoints)

    def prefer(self, index: int) -> None:
        with self._mutex:
            self._preferred = index

    def move_on_from(self, index: int) -> None:
        """Prefer the endpoint after ``index``, unless another call already
        moved the preference elsewhere."""
        with self._mutex:
            if self._preferred % len(self.endpoints) == index:
                self._preferred = (index + 1) % len(self.endpoints)

    def url(self, index: int, path: str) -> str:
        return self.endpoints[index].base + path

    def named_leader(self, headers: httpx.Headers) -> Optional[int]:
        addr = headers.get(LEADER_ADDR_HEADER)
        if not addr:
            return None
        for i, endpoint in enumerate(self.endpoints):
            if endpoint.addr == addr.strip():
                return i
        return None

    def outcome(self, index: int, response: httpx.Response, body: bytes) -> Union[Retry, Any]:
        """The decoded answer (of ``response``, whose body is ``body``), a
        :class:`Retry` for a 503, or raises the answer's error. Updates the
        leader preference."""
        leader = self.named_leader(response.headers)
        if response.status_code == 503:
            error = decode_error(response.status_code, body)
            if leader is not None and leader != index:
                # A node that is not (or no longer) the leader named another:
                # go there now; its Retry-After was about itself.
                self.prefer(leader)
                return Retry(error, None, at_once=True)
            # No leader known, or a leader that cannot commit (cut off from
            # the others): try the next node, after the server's Retry-After.
            self.move_on_from(index)
            return Retry(error, retry_after(response.headers))
        self.prefer(leader if leader is not None else index)
        if 200 <= response.status_code < 300:
            return decode_ok(response, body)
        raise decode_error(response.status_code, body)

    def give_up_at(self, started: float, wait: float, deadline: Optional[float]) -> float:
        give_up = started + self.retry_budget + wait
        return give_up if deadline is None else min(give_up, deadline)

    def attempt_timeout(self, wait: float, give_up: float) -> float:
        return max(0.001, min(self.timeout + wait, give_up - time.monotonic()))

    @staticmethod
    def next_delay(retry: Optional[Retry], backoff: float) -> float:
        if retry is not None and retry.delay is not None:
            return jittered(max(retry.delay, backoff), RETRY_AFTER_JITTER)
        return jittered(backoff, 0.5)


async def asleep(seconds: float) -> None:
    """The retry loop's pause in the asyncio client; :func:`sleep` in the sync
    one. The two are a name apart (``asleep`` in the async source becomes
    ``sleep`` in the sync code made from it), where ``asyncio.sleep`` and
    ``time.sleep`` would differ in the module too."""
    await asyncio.sleep(seconds)


def sleep(seconds: float) -> None:
    """The retry loop's pause in the sync client: see :func:`asleep`."""
    time.sleep(seconds)


def client_side(error: LeaseholdError) -> LeaseholdError:
    """Marks an error as raised by the client itself (no HTTP status)."""
    error.status = None
    return error


def unreachable(endpoint: Endpoint, error: Exception) -> LeaseholdError:
    detail = str(error) or type(error).__name__
    return client_side(Unavailable(f"{endpoint.base}: {detail}"))


def untrusted(error: BaseException) -> bool:
    """Whether ``error`` came from a TLS handshake that refused the node's
    certificate. Not retried: the nodes share one CA, so every node would be
    refused alike, and an untrusted certificate may be an impostor's, which
    no retry should paper over."""
    seen: Optional[BaseException] = error
    for _ in range(8):  # httpx and httpcore wrap the ssl error twice
        if seen is None:
            break
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
