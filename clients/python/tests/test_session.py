"""The Session guard against real clusters: one keepalive keeps two locks far
past the session's ttl, leaving the block releases both, a delete by anyone
else sets `lost` at once, and sequence numbers make a retried acquire
harmless."""

from __future__ import annotations

import asyncio
import time

import pytest

import leasehold

TTL = 3.0

pytestmark = pytest.mark.timeout(90)


def test_one_session_keeps_two_locks_past_its_ttl_and_closing_releases_both(shared_cluster, unique):
    client, other = shared_cluster.client(), shared_cluster.client()
    # Twice TTL: a keepalive (every ttl / 3) then has 3.4 s, not 1.7 s, to
    # be answered before the safe deadline on a machine loaded by other
    # suites. The same 9 s in all, past one ttl.
    ttl = 2 * TTL
    opened_at = time.monotonic()
    with client.session("alice", ttl=ttl) as session:
        assert session.valid_until() <= opened_at + ttl, "anchored at the send time"
        ledger = session.lock(unique("ledger"))
        pair = session.lock_many([unique("inbox"), unique("outbox")])
        held = {unique("ledger"): ledger.token, unique("inbox"): pair.token}
        while time.monotonic() < opened_at + 1.5 * ttl:
            for name, token in held.items():
                with pytest.raises(leasehold.HeldByOther) as caught:
                    other.acquire(name, "bob", TTL)
                assert (caught.value.holder, caught.value.token) == ("alice", token)
            assert not session.lost.is_set(), session.lost_reason
            assert not session.is_lost()
            time.sleep(0.5)
        assert session.valid_until() > opened_at + ttl, "keepalives re-anchored the session"
        view = client.get_session(session.id)
        assert view is not None
        assert view.lock_count == 3
        assert {lock.name: lock.token for lock in view.locks or []} == {
            **held, unique("outbox"): pair.token,
        }  # fmt: skip
        lease = client.get(unique("ledger"))
        assert lease is not None
        assert lease.session == session.id
    for name in (unique("ledger"), unique("inbox"), unique("outbox")):
        assert client.get(name) is None, f"leaving the block released {name}"
    assert client.get_session(session.id) is None
    assert not session.lost.is_set(), "closing on purpose is no loss"
    assert other.acquire(unique("ledger"), "bob", TTL).token > ledger.token


def test_deleting_the_session_from_another_client_sets_lost(shared_cluster, unique):
    client, operator = shared_cluster.client(), shared_cluster.client()
    called: list[leasehold.LostReason] = []
    with client.session("alice", ttl=TTL, on_lost=called.append) as session:
        session.lock_many([unique("a"), unique("b")])
        deleted = operator.delete_session(session.id)
        assert sorted(deleted.released) == sorted([unique("a"), unique("b")])
        assert session.lost.wait(timeout=TTL), "lost was never set"
        reason = session.lost_reason
        assert reason is not None
        assert (reason.kind, reason.code) == ("revoked", "session_not_found")
        assert called == [reason]
        with pytest.raises(leasehold.SessionNotFound):
            session.lock(unique("c"))
    # Leaving the block after the loss does not raise (the delete finds nothing).
    assert operator.acquire(unique("a"), "bob", TTL).owner == "bob"


def test_lost_is_set_by_the_safe_deadline_when_every_node_hangs(make_cluster):
    cluster = make_cluster()
    client = cluster.client()
    try:
        with client.session("alice", ttl=TTL) as session:
            session.lock("fragile")
            first_deadline = session.valid_until()
            give_up = time.monotonic() + 10
            while session.valid_until() == first_deadline:  # one keepalive first
                assert time.monotonic() < give_up, "the watchdog never kept the session alive"
                time.sleep(0.05)
            for node in cluster.ids:
                cluster.stop_node(node)
            stopped_at = time.monotonic()
            assert session.lost.wait(timeout=TTL + 10), "lost was never set"
            lost_at = time.monotonic()
            assert lost_at <= session.valid_until() + session.drift_margin
            assert lost_at <= stopped_at + TTL, f"{lost_at - (stopped_at + TTL):.3f} s late"
            assert session.lost_reason is not None
            assert session.lost_reason.kind == "expired"
            for node in cluster.ids:
                cluster.cont_node(node)
            cluster.wait_for_leader()
        # Leaving the block after the loss does not raise, whether or not the
        # cluster has expired the session by then.
    finally:
        for node in cluster.ids:
            cluster.cont_node(node)


def test_a_retried_acquire_with_the_same_seq_gets_its_first_answer(shared_cluster, unique):
    client = shared_cluster.client()
    created = client.create_session("alice", TTL)
    try:
        first = client.acquire(unique(), "alice", session=created.session, seq=1)
        client.release(unique(), first.token, session=created.session, seq=2)
        again = client.acquire(unique(), "alice", session=created.session, seq=1)
        assert again.token == first.token, "answered from the session's memory"
        assert client.get(unique()) is None, "and not applied a second time"
        listed = client.list_sessions(after=created.session - 1, limit=1)
        assert [s.session for s in listed] == [created.session]
    finally:
        client.delete_session(created.session)


def test_an_acquire_with_both_ttl_and_session_is_refused_before_sending(shared_cluster, unique):
    client = shared_cluster.client()
    created = client.create_session("alice", TTL)
    try:
        with pytest.raises(leasehold.InvalidArgument) as caught:
            client.acquire(unique(), "alice", TTL, session=created.session)
        assert caught.value.status is None
        assert client.get(unique()) is None
    finally:
        client.delete_session(created.session)


def test_async_session_keeps_two_locks_and_closing_releases_them(shared_cluster, unique):
    async def main() -> None:
        async with shared_cluster.async_client() as client:
            opened_at = time.monotonic()
            async with client.session("alice", ttl=TTL) as session:
                assert isinstance(session.lost, asyncio.Event)
                pair = await session.lock_many([unique("a"), unique("b")])
                while time.monotonic() < opened_at + 2 * TTL:
                    with pytest.raises(leasehold.HeldByOther):
                        await client.acquire(unique("a"), "bob", TTL)
                    assert not session.lost.is_set(), session.lost_reason
                    await asyncio.sleep(0.5)
                assert session.valid_until() > opened_at + TTL
                assert (await client.get(unique("b"))).token == pair.token
            assert await client.get(unique("a")) is None
            assert await client.get(unique("b")) is None
            assert await client.get_session(session.id) is None

    asyncio.run(main())


def test_async_session_deleted_elsewhere_sets_lost(shared_cluster, unique):
    async def main() -> None:
        async with shared_cluster.async_client() as client:
            session = await client.session("alice", ttl=TTL).open()
            await session.lock(unique())
            await client.delete_session(session.id)
            await asyncio.wait_for(session.lost.wait(), timeout=TTL)
            assert session.lost_reason.code == "session_not_found"
            with pytest.raises(leasehold.SessionNotFound):
                await session.close()

    asyncio.run(main())
