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


def someone_waits_for(client: leasehold.Client, name: str) -> bool:
    """Whether anyone waits for lock ``name``: a shared try-acquire is then
    refused (``Reserved``), so that no waiting writer starves."""
    try:
        late = client.acquire(name, "late", TTL, shared=True)
    except leasehold.Reserved:
        return True
    client.release(name, late.token, shared_owner="late")
    return False


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

        # A reader behind the waiting writer is refused: no writer starvation.
        until(lambda: someone_waits_for(client, name))
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


def test_a_sessions_permit_and_read_lock_go_to_waiters_when_it_ends(shared_cluster, unique):
    # Held under a session: no lease of their own (renew is refused), and
    # both handed on in the entry that deletes the session.
    client, other = shared_cluster.client(), shared_cluster.client()
    pool, doc = unique("pool"), unique("doc")
    session = client.session("s", ttl=TTL).open()
    permit = session.acquire_permits(pool, 1)
    read = session.read_lock(doc)
    assert (permit.ttl_ms, read.ttl_ms) == (3000, 3000), "they live by the session's ttl"
    with pytest.raises(leasehold.HeldUnderSession):
        client.renew_permits(pool, "s", permit.token)
    with pytest.raises(leasehold.HeldUnderSession):
        client.renew(doc, read.token, shared_owner="s")

    permits: list[leasehold.Permits] = []
    leases: list[leasehold.Lease] = []
    waiters = [
        threading.Thread(
            target=lambda: permits.append(other.acquire_permits(pool, "w", 1, TTL, wait=30))
        ),
        threading.Thread(target=lambda: leases.append(other.acquire(doc, "x", TTL, wait=30))),
    ]
    for waiter in waiters:
        waiter.start()
    until(lambda: (client.get_semaphore(pool) or {}).get("waiters"))

    until(lambda: someone_waits_for(client, doc))
    assert sorted(session.close().released) == sorted([pool, doc])
    for waiter in waiters:
        waiter.join(30)
        assert not waiter.is_alive()
    assert permits[0].token > permit.token
    assert leases[0].token > read.token
    assert permits[0].token == leases[0].token, "both granted in the delete's entry"
    client.release_permits(pool, "w", permits[0].token)
    client.release(doc, leases[0].token)


def test_a_permit_under_an_ended_session_is_refused_and_sets_lost(shared_cluster, unique):
    client = shared_cluster.client()
    session = client.session("s", ttl=TTL).open()
    client.delete_session(session.id)
    with pytest.raises(leasehold.SessionNotFound):
        session.acquire_permits(unique(), 2)
    assert session.lost.is_set()
    assert client.get_semaphore(unique()) is None


def test_async_session_takes_a_permit_and_a_read_lock(make_cluster):
    cluster = make_cluster()

    async def body() -> None:
        async with cluster.async_client() as client:
            async with client.session("s", ttl=TTL) as session:
                permit = await session.acquire_permits("pool", 2, permits=2)
                read = await session.read_lock("doc")
                assert (permit.permits, permit.owner, read.owner) == (2, "s", "s")
                await asyncio.sleep(TTL)  # past the session's first ttl: its keepalives keep both
                view = await client.get_semaphore("pool")
                assert view is not None
                assert view["holders"][0]["token"] == permit.token
            assert await client.get_semaphore("pool") is None, "closing the session returned them"

    asyncio.run(body())
