"""The Lock guard against real clusters: the watchdog keeps a short lock far
past its ttl, `lost` is set by the safe deadline when every node hangs, and
leaving the block releases."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

import leasehold

TTL = 3.0

pytestmark = pytest.mark.timeout(90)


def test_watchdog_holds_a_3s_lock_for_15s(make_cluster):
    cluster = make_cluster()
    client, other = cluster.client(), cluster.client()
    acquired_at = time.monotonic()
    with client.lock("guarded", ttl=TTL, owner="alice") as lease:
        token = lease.token
        assert token > 0
        assert lease.valid_until() <= acquired_at + TTL, "anchored at the send time"
        while time.monotonic() < acquired_at + 5 * TTL:
            with pytest.raises(leasehold.HeldByOther) as caught:
                other.acquire("guarded", "bob", TTL)
            assert (caught.value.holder, caught.value.token) == ("alice", token)
            assert not lease.lost.is_set(), lease.lost_reason
            assert not lease.is_lost()
            time.sleep(0.5)
        view = client.get("guarded")
        assert (view.owner, view.token) == ("alice", token)
        assert lease.valid_until() > acquired_at + TTL, "the watchdog re-anchored the lease"
        assert lease.lost_reason is None
    assert client.get("guarded") is None, "leaving the block released it"
    assert not lease.lost.is_set()
    assert other.acquire("guarded", "bob", TTL).token > token


def test_lost_is_set_by_the_safe_deadline_when_every_node_hangs(make_cluster):
    cluster = make_cluster()
    client = cluster.client()
    called: list[leasehold.LostReason] = []
    try:
        with client.lock("fragile", ttl=TTL, owner="alice", on_lost=called.append) as lease:
            first_deadline = lease.valid_until()
            margin = lease.drift_margin
            give_up = time.monotonic() + 10
            while lease.valid_until() == first_deadline:  # let the watchdog renew once
                assert time.monotonic() < give_up, "the watchdog never renewed"
                assert not lease.is_lost()
                time.sleep(0.05)

            for node in cluster.ids:
                cluster.stop_node(node)
            # No renewal sent after this instant can succeed.
            stopped_at = time.monotonic()
            assert lease.lost.wait(timeout=TTL + 10), "lost was never set"
            lost_at = time.monotonic()
            deadline = lease.valid_until()

            # Not late: by the last anchor + ttl (the earliest the cluster
            # could expire the lease), which the stop bounds from above.
            assert lost_at <= deadline + margin, f"{lost_at - (deadline + margin):.3f} s late"
            assert lost_at <= stopped_at + TTL, f"{lost_at - (stopped_at + TTL):.3f} s late"
            assert lease.lost_reason is not None
            assert lease.lost_reason.kind == "expired"
            assert called == [lease.lost_reason], "on_lost called once with the reason"
            assert lease.is_lost()
            assert lease.valid_until() == deadline, "the deadline stops moving once lost"

            for node in cluster.ids:
                cluster.cont_node(node)
            cluster.wait_for_leader()
        # Leaving the block after a loss does not raise (the release may or
        # may not still find the lease).
    finally:
        for node in cluster.ids:
            cluster.cont_node(node)


def test_nothing_reachable_raises_client_side_unavailable(make_cluster):
    cluster = make_cluster()
    for node in cluster.ids:
        cluster.stop_node(node)
    try:
        with pytest.raises(leasehold.Unavailable) as caught:
            cluster.client(timeout=0.5, retry_budget=1.5).get("anything")
        assert caught.value.status is None
    finally:
        for node in cluster.ids:
            cluster.cont_node(node)


def test_lost_is_set_at_once_when_the_cluster_ends_the_lease(shared_cluster, unique):
    client = shared_cluster.client()
    with client.lock(unique(), ttl=TTL, owner="alice") as lease:
        # Someone releases it under our token (an operator, a bug): the next
        # renewal is answered not_held and lost is set without waiting for
        # the safe deadline.
        client.release(unique(), lease.token)
        assert lease.lost.wait(timeout=TTL + 5)
        assert lease.lost_reason.kind == "revoked"
        assert lease.lost_reason.code in ("not_held", "stale_token")
    assert client.get(unique()) is None


def test_lock_waits_for_its_turn_and_raises_wait_timeout(shared_cluster, unique):
    client = shared_cluster.client()
    holder = client.acquire(unique(), "alice", TTL)
    with pytest.raises(leasehold.WaitTimeout):
        client.lock(unique(), ttl=TTL, wait=1, owner="bob").acquire()
    got: list[int] = []

    def waiter() -> None:
        with client.lock(unique(), ttl=TTL, wait=20, owner="carol") as lease:
            got.append(lease.token)

    thread = threading.Thread(target=waiter)
    thread.start()
    give_up = time.monotonic() + 10
    while not client.get(unique()).waiters:
        assert time.monotonic() < give_up
        time.sleep(0.05)
    client.release(unique(), holder.token)
    thread.join(timeout=20)
    assert got
    assert got[0] > holder.token
    assert client.get(unique()) is None


def test_exception_in_the_block_still_releases(shared_cluster, unique):
    client = shared_cluster.client()
    with pytest.raises(RuntimeError, match="boom"), client.lock(unique(), ttl=TTL):
        raise RuntimeError("boom")
    assert client.get(unique()) is None


def test_async_lock_watchdog_and_release(make_cluster):
    cluster = make_cluster()

    # Twice TTL: a renewal (every ttl / 3) then has 3.4 s, not 1.7 s, to be
    # answered before the safe deadline, which a machine loaded by other
    # suites once overran. The same 9 s in all, past one ttl.
    ttl = 2 * TTL

    async def main() -> None:
        async with cluster.async_client() as client, cluster.async_client() as other:
            started = time.monotonic()
            async with client.lock("async-guarded", ttl=ttl, owner="alice") as lease:
                assert isinstance(lease.lost, asyncio.Event)
                token = lease.token
                while time.monotonic() < started + 1.5 * ttl:
                    with pytest.raises(leasehold.HeldByOther):
                        await other.acquire("async-guarded", "bob", TTL)
                    assert not lease.lost.is_set(), lease.lost_reason
                    await asyncio.sleep(0.5)
                assert lease.valid_until() > started + ttl
                assert (await client.get("async-guarded")).token == token
            assert await client.get("async-guarded") is None

    asyncio.run(main())


def test_async_lost_is_set_by_the_safe_deadline(make_cluster):
    cluster = make_cluster()

    async def main() -> None:
        async with cluster.async_client() as client:
            lease = await client.lock("async-fragile", ttl=TTL, owner="alice").acquire()
            first = lease.valid_until()
            while lease.valid_until() == first:
                await asyncio.sleep(0.05)
            for node in cluster.ids:
                cluster.stop_node(node)
            stopped_at = time.monotonic()
            await asyncio.wait_for(lease.lost.wait(), timeout=TTL + 10)
            lost_at = time.monotonic()
            # As the sync test: set before the ttl ran out since the nodes
            # stopped. (Not "by valid_until + drift_margin": that bound has
            # 0.3 s of room, which a loaded machine's event loop overran.)
            assert lost_at <= stopped_at + TTL, f"{lost_at - (stopped_at + TTL):.3f} s late"
            assert lease.lost_reason.kind == "expired"
            for node in cluster.ids:
                cluster.cont_node(node)
            cluster.wait_for_leader()
            # The lease may have ended on the cluster meanwhile.
            with contextlib.suppress(leasehold.NotHeld, leasehold.StaleToken):
                await lease.release()

    try:
        asyncio.run(main())
    finally:
        for node in cluster.ids:
            cluster.cont_node(node)
