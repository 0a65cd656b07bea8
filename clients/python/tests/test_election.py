"""Elections and watches against real clusters: a leadership guard kept
past its ttl and handed over on resign, proclaim fenced by the token, an
observer that starts with the leader, and a watch that resumes on another
node after the one serving it is killed, with no gap and no duplicate."""

from __future__ import annotations

import asyncio
import threading

import pytest

import leasehold

TTL = 3.0

pytestmark = pytest.mark.timeout(90)


def test_leadership_is_kept_fenced_and_handed_over(shared_cluster, unique):
    client, other = shared_cluster.client(), shared_cluster.client()
    name = unique("election")
    election = client.election(name)
    with election.campaign({"addr": "a:1"}, ttl=TTL, owner="a") as leader:
        first = leader.token
        with pytest.raises(leasehold.HeldByOther) as caught:
            other.campaign(name, "b", {"addr": "b:1"}, TTL)
        assert caught.value.holder == "a"
        seen = election.leader()
        assert seen is not None
        assert (seen.candidate, seen.token, seen.value) == (
            "a",
            first,
            {"addr": "a:1"},
        )
        assert seen.index is not None
        assert seen.index >= first
        leader.proclaim({"addr": "a:2"})
        assert election.leader().value == {"addr": "a:2"}
        with pytest.raises(leasehold.StaleToken):
            other.proclaim(name, "a", first + 1, "stale")
        elected: list[leasehold.Leader] = []
        waiting = threading.Thread(
            target=lambda: elected.append(other.campaign(name, "b", "b", TTL, wait=30))
        )
        waiting.start()
        # The watchdog keeps a leadership of 3 s past its ttl while b waits.
        observe = iter(other.election(name).observe())
        current = next(observe)
        assert (current.type, current.data["owner"], current.data["token"]) == (
            "proclaimed",
            "a",
            first,
        )
        threading.Event().wait(2 * TTL)
        assert not leader.is_lost()
        assert not elected
    waiting.join(30)
    assert elected
    assert (elected[0].candidate, elected[0].token > first) == ("b", True)
    ended = next(observe)
    handed = next(observe)
    assert (ended.type, ended.data["token"]) == ("released", first)
    assert (handed.type, handed.data["owner"], handed.data["token"]) == (
        "proclaimed",
        "b",
        elected[0].token,
    )


def test_watch_resumes_on_another_node_without_gap_or_duplicate(make_cluster):
    cluster = make_cluster()
    leader = cluster.wait_for_leader()
    follower = cluster.follower_of(leader)

    async def run() -> None:
        endpoints = [cluster.url(follower), cluster.url(leader)]
        async with leasehold.AsyncClient(endpoints) as watcher, cluster.async_client() as writer:
            # The watch starts after this entry, however late it connects.
            start = (await writer.acquire("before", "w", 10)).token
            events = watcher.watch(prefix="py/", after=start).__aiter__()
            tokens = []
            for i in range(30):
                lease = await writer.acquire(f"py/{i % 4}", "w", 10)
                tokens.append(lease.token)
                await writer.release(f"py/{i % 4}", lease.token)
            seen = [await events.__anext__() for _ in range(20)]
            cluster.kill(follower)
            for i in range(30, 60):
                lease = await writer.acquire(f"py/{i % 4}", "w", 10)
                tokens.append(lease.token)
                await writer.release(f"py/{i % 4}", lease.token)
            while seen[-1].index < tokens[-1] or seen[-1].type != "released":
                seen.append(await asyncio.wait_for(events.__anext__(), 30))
        ids = [e.id for e in seen]
        assert len(ids) == len(set(ids)), "no event twice"
        acquired = [e.data["token"] for e in seen if e.type == "acquired"]
        assert acquired == tokens, "every acquire, once, in order"

    asyncio.run(run())
