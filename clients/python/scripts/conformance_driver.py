"""The Python client's conformance driver (``clients/conformance/PROTOCOL.md``): JSON
lines on stdin, each run through the asyncio client's public API in a task
of its own, one answer line per request on stdout. It holds no lock logic:
guards, watchdogs, retries and deadlines are the client's.

Started by ``clients/conformance/drivers/python`` with the interpreter of the
client's test environment (``clients/python/.venv``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any, Optional, Union

import leasehold
from leasehold import AsyncLock, AsyncLockSet, AsyncSession, errors

Guard = Union[AsyncLock, AsyncSession, AsyncLockSet]
Answer = dict[str, Any]


class Invalid(Exception):
    """The request is not one the protocol allows."""


def failure(error: BaseException) -> Answer:
    """The protocol's error object: ``api`` for the cluster's answer,
    ``unavailable`` when the retry budget ran out, ``invalid`` for what the
    client refused before sending (or a request the driver cannot run)."""
    if isinstance(error, (errors.Unavailable, errors.DecodeError)):
        kind = "unavailable"
    elif isinstance(error, errors.ApiError) and error.status is not None:
        kind = "api"
    else:
        kind = "invalid"
    code = getattr(error, "code", None) if kind != "invalid" else None
    status = getattr(error, "status", None) if kind != "invalid" else None
    return {"kind": kind, "code": code, "status": status, "message": str(error)}


def seconds(request: dict[str, Any], key: str) -> Optional[float]:
    ms = request.get(key)
    return None if ms is None else ms / 1000


class Driver:
    def __init__(self, client: leasehold.AsyncClient) -> None:
        self.client = client
        self.guards: dict[str, Guard] = {}
        self.handles = 0

    def keep(self, kind: str, guard: Guard) -> str:
        self.handles += 1
        handle = f"{kind}-{self.handles}"
        self.guards[handle] = guard
        return handle

    def guard(self, request: dict[str, Any]) -> Guard:
        guard = self.guards.get(request["handle"])
        if guard is None:
            raise Invalid(f"no handle {request['handle']}")
        return guard

    def watched(self, request: dict[str, Any]) -> Union[AsyncLock, AsyncSession]:
        guard = self.guard(request)
        if isinstance(guard, AsyncLockSet):
            raise Invalid("a lock set has no watchdog to ask")
        return guard

    async def handle(self, request: dict[str, Any]) -> Answer:
        op = request.get("op")
        client = self.client
        if op == "lock":
            lock = client.lock(
                request["name"],
                ttl=request["ttl_ms"] / 1000,
                wait=seconds(request, "wait_ms"),
                owner=request.get("owner"),
                drift_margin=seconds(request, "drift_margin_ms"),
            )
            await lock.acquire()
            return {"handle": self.keep("lock", lock), "token": lock.token, "owner": lock.owner}
        if op == "guard":
            guard = self.watched(request)
            return {
                "token": guard.token if isinstance(guard, AsyncLock) else None,
                "lost": guard.is_lost(),
                "at_risk": guard.is_at_risk(),
                "safe_remaining_ms": round((guard.valid_until() - time.monotonic()) * 1000),
            }
        if op == "wait_lost":
            guard = self.watched(request)
            try:
                await asyncio.wait_for(guard.lost.wait(), request["timeout_ms"] / 1000)
            except asyncio.TimeoutError:
                return {"lost": False, "reason": None, "code": None}
            reason = guard.lost_reason
            assert reason is not None
            return {"lost": True, "reason": reason.kind, "code": reason.code}
        if op == "unlock":
            held = self.guards.pop(request["handle"], None)
            if not isinstance(held, (AsyncLock, AsyncLockSet)):
                raise Invalid(f"no lock or lock set {request['handle']}")
            await held.release()
            return {}
        if op == "acquire":
            lease = await client.acquire(
                request["name"],
                request["owner"],
                request["ttl_ms"] / 1000,
                wait=seconds(request, "wait_ms"),
                request_id=request.get("request_id"),
            )
            return {"token": lease.token, "ttl_ms": lease.ttl_ms}
        if op == "renew":
            ttl = seconds(request, "ttl_ms")
            lease = await client.renew(request["name"], request["token"], ttl)
            return {"token": lease.token, "ttl_ms": lease.ttl_ms}
        if op == "release":
            await client.release(request["name"], request["token"])
            return {}
        if op == "get":
            view = await client.get(request["name"])
            return {"lease": None if view is None else {"owner": view.owner, "token": view.token}}
        if op == "session_open":
            session = await client.session(ttl=request["ttl_ms"] / 1000).open()
            return {"handle": self.keep("session", session), "session": session.id}
        if op == "session_lock":
            under = self.guards.get(request["session"])
            if not isinstance(under, AsyncSession):
                raise Invalid(f"no session {request['session']}")
            lease = await under.lock(request["name"], seconds(request, "wait_ms"))
            return {"handle": f"{request['session']}/{request['name']}", "token": lease.token}
        if op == "session_close":
            closing = self.guards.pop(request["handle"], None)
            if not isinstance(closing, AsyncSession):
                raise Invalid(f"no session {request['handle']}")
            await closing.close()
            return {}
        if op == "multi_lock":
            locks = client.lock_many(
                request["names"],
                ttl=request["ttl_ms"] / 1000,
                wait=seconds(request, "wait_ms"),
                owner=request.get("owner"),
            )
            await locks.acquire()
            tokens = {lease.name: lease.token for lease in locks.leases.grants}
            return {"handle": self.keep("set", locks), "tokens": tokens}
        if op == "record_write":
            await client.put_record(
                request["key"], request["lock"], request["token"], request["value"]
            )
            return {}
        if op == "record_read":
            record = await client.get_record(request["key"])
            if record is None:
                return {"value": None, "token": None}
            return {"value": record.value, "token": record.token}
        if op == "gate_pass":
            await client.gate(request["gate"], request["lock"], request["token"])
            return {}
        raise Invalid(f"unknown op {op!r}")


def write(answer: Answer) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


async def answer(driver: Driver, request: dict[str, Any]) -> None:
    try:
        result: Answer = {"ok": True, **await driver.handle(request)}
    except Exception as e:  # every failure is an answer, never a dead driver
        result = {"ok": False, "error": failure(e)}
    write({"id": request.get("id"), **result})


async def main() -> None:
    budget = os.environ.get("LEASEHOLD_RETRY_BUDGET_MS")
    client = leasehold.AsyncClient(
        os.environ["LEASEHOLD_ENDPOINTS"],
        token=os.environ.get("LEASEHOLD_TOKEN") or None,
        retry_budget=int(budget) / 1000 if budget else 10.0,
    )
    driver = Driver(client)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    write({"ready": True, "client": "python", "version": leasehold.__version__})
    tasks: set[asyncio.Task[None]] = set()
    while line := await reader.readline():
        request = json.loads(line)
        if request.get("op") == "shutdown":
            write({"id": request.get("id"), "ok": True})
            break
        task = asyncio.ensure_future(answer(driver, request))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    for task in tasks:
        task.cancel()
    await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
