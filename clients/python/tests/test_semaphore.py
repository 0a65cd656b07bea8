"""Semaphores and read/write locks against a real cluster: the guards take
and keep permits and shared leases, the cluster's refusals arrive as their
own exceptions, and a waiting writer is handed the lock when the readers go."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

import pytest

import leasehold

TTL = 3.0

pytestmark = pytest.mark.timeout(90)


def until(ready: Callable[[], object], bound: float = 20.0) -> None:
    """Polls ``ready`` until it holds, for ``bound`` seconds at most."""
    give_up = time.monotonic() + bound
    while not ready():
        assert time.monotonic() < give_up, "never happened"
        time.sleep(0.02)


def test_semaphore_guards_share_the_limit(shared_cluster, unique):
    client = shared_cluster.client()
    name = unique()
    with (
        client.semaphore(name, 2, ttl=TTL, owner="a") as a,
        client.semaphore(name, 2, ttl=TTL, owner="b") as b,
    ):
        assert b.token > a.token > 0
        assert (a.permits, a.limit) == (1, 2)
        with pytest.raises(leasehold.SemaphoreFull) as full:
            client.acquire_permits(name, "c", 2, TTL)
        assert {h["owner"] for h in full.value.holders} == {"a", "b"}
        with pytest.raises(leasehold.LimitMismatch) as mismatch:
            client.acquire_permits(name, "c", 3, TTL)
        assert mismatch.value.limit == 2
        view = client.get_semaphore(name)
        assert (view["limit"], view["in_use"]) == (2, 2)
        assert not a.is_lost()
        assert not b.is_lost()
    assert client.get_semaphore(name) is None, "leaving the blocks returned the permits"


def test_a_waiting_permit_is_granted_when_one_returns(shared_cluster, unique):
    # One client per thread that waits, as an application would have.
    client, other = shared_cluster.client(), shared_cluster.client()
    name = unique()
    held = client.acquire_permits(name, "a", 1, TTL)
    answers: list[leasehold.Permits] = []
    waiter = threading.Thread(
        target=lambda: answers.append(other.acquire_permits(name, "b", 1, TTL, wait=30))
    )
    waiter.start()
    until(lambda: (client.get_semaphore(name) or {}).get("waiters"))
    client.release_permits(name, "a", held.token)
    waiter.join(30)
    assert not waiter.is_alive()
    assert answers
    assert answers[0].token > held.token
    client.release_permits(name, "b", answers[0].token)


def test_readers_share_and_a_writer_waits_for_them(shared_cluster, unique):
    client, other = shared_cluster.client(), shared_cluster.client()
    name = unique()
    with (
        client.read_lock(name, ttl=TTL, owner="r1") as r1,
        client.read_lock(name, ttl=TTL, owner="r2") as r2,
    ):
        assert r2.token > r1.token
        with pytest.raises(leasehold.HeldByOther):
            client.acquire(name, "w", TTL)
        writer = other.write_lock(name, ttl=TTL, wait=30, owner="w")
        thread = threading.Thread(target=writer.acquire)
        thread.start()

        def late_reader_refused() -> bool:
            # A reader behind the waiting writer is refused: no writer starvation.
            try:
                late = client.acquire(name, "late", TTL, shared=True)
            except leasehold.Reserved:
                return True
            client.release(name, late.token, shared_owner="late")
            return False

        until(late_reader_refused)
        newest = r2.token
    thread.join(30)
    assert not thread.is_alive()
    assert writer.token > newest
    writer.release()


def test_crossing_waits_raise_deadlock(shared_cluster, unique):
    client, other = shared_cluster.client(), shared_cluster.client()
    x, y = unique("x"), unique("y")
    held_x = client.acquire(x, "a", 30)
    held_y = client.acquire(y, "b", 30)
    granted: list[leasehold.Lease] = []
    thread = threading.Thread(target=lambda: granted.append(other.acquire(y, "a", 30, wait=30)))
    thread.start()
    until(lambda: client.get(y).waiters)
    with pytest.raises(leasehold.Deadlock) as refused:
        client.acquire(x, "b", 30, wait=30)
    assert refused.value.cycle == ["b", "a"]
    client.release(y, held_y.token)
    thread.join(30)
    assert granted
    assert granted[0].token > held_y.token
    client.release(y, granted[0].token)
    client.release(x, held_x.token)


def test_async_semaphore_and_read_lock(make_cluster):
    cluster = make_cluster()

    async def body() -> None:
        async with cluster.async_client() as client:
            async with client.semaphore("pool", 1, ttl=TTL, owner="a") as held:
                assert held.token > 0
                with pytest.raises(leasehold.SemaphoreFull):
                    await client.acquire_permits("pool", "b", 1, TTL)
            async with client.read_lock("doc", ttl=TTL, owner="r") as read:
                await asyncio.sleep(TTL)  # past a renewal
                assert not read.is_lost()
            assert await client.get_semaphore("pool") is None

    asyncio.run(body())
