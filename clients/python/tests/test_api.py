"""The API against a real 3-node cluster: lifecycle, conflicts, waiting,
fencing, and every error the cluster can be made to answer."""

from __future__ import annotations

import sqlite3
import threading
import time

import httpx
import pytest

import cluster
import leasehold

pytestmark = pytest.mark.timeout(60)

TTL = 5.0


def test_lifecycle_acquire_get_renew_release(shared_cluster, unique):
    client = shared_cluster.client()
    name = unique()
    before = time.monotonic()
    lease = client.acquire(name, "alice", TTL)
    assert (lease.name, lease.owner, lease.ttl_ms, lease.reacquired) == (name, "alice", 5000, False)
    assert lease.token > 0
    assert before <= lease.sent_at
    assert lease.valid_until(0.5) <= lease.sent_at + TTL - 0.5

    view = client.get(name)
    assert view is not None
    assert (view.owner, view.token, view.ttl_ms, view.waiters) == ("alice", lease.token, 5000, [])
    assert view.request_id is not None
    assert name in [v.name for v in client.list(prefix=unique(""))]

    again = client.acquire(name, "alice", TTL)
    assert (again.token, again.reacquired) == (lease.token, True), "same owner: same grant"

    renewed = client.renew(name, lease.token, 8.0)
    assert (renewed.token, renewed.ttl_ms, renewed.reacquired) == (lease.token, 8000, None)
    assert renewed.sent_at > lease.sent_at

    released = client.release(name, lease.token)
    assert (released.name, released.token, released.released) == (name, lease.token, True)
    assert client.get(name) is None
    assert name not in [v.name for v in client.list(prefix=unique(""))]


def test_second_owner_gets_held_by_other(shared_cluster, unique):
    client = shared_cluster.client()
    lease = client.acquire(unique(), "alice", TTL)
    with pytest.raises(leasehold.HeldByOther) as caught:
        client.acquire(unique(), "bob", TTL)
    e = caught.value
    assert (e.status, e.code, e.holder, e.token) == (409, "held", "alice", lease.token)
    assert e.expires_in_ms is not None
    client.release(unique(), lease.token)
    assert client.acquire(unique(), "bob", TTL).token > lease.token


def test_waiter_gets_the_lock_on_release(shared_cluster, unique):
    client = shared_cluster.client()
    name = unique()
    first = client.acquire(name, "alice", TTL)
    outcome: dict[str, object] = {}

    def wait_for_it() -> None:
        try:
            outcome["lease"] = client.acquire(name, "bob", TTL, wait=20)
        except Exception as e:
            outcome["error"] = e

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    give_up = time.monotonic() + 10
    while not any(w.owner == "bob" for w in client.get(name).waiters):
        assert time.monotonic() < give_up, "bob never queued"
        time.sleep(0.05)
    assert "lease" not in outcome, "granted while alice held it"
    client.release(name, first.token)
    waiter.join(timeout=20)
    assert not waiter.is_alive()
    assert "error" not in outcome, outcome
    handed = outcome["lease"]
    assert isinstance(handed, leasehold.Lease)
    assert handed.owner == "bob"
    assert handed.token > first.token
    view = client.get(name)
    assert (view.owner, view.token) == ("bob", handed.token)
    # The wait went over HTTP/2: had the node refused it, the client would
    # have fallen back to HTTP/1.1 for good.
    assert client._core.http2


def test_wait_runs_out(shared_cluster, unique):
    client = shared_cluster.client()
    lease = client.acquire(unique(), "alice", TTL)
    with pytest.raises(leasehold.WaitTimeout) as caught:
        client.acquire(unique(), "bob", TTL, wait=1)
    assert (caught.value.status, caught.value.code) == (409, "wait_timeout")
    view = client.get(unique())
    assert (view.owner, view.token) == ("alice", lease.token)


def test_through_a_follower_the_client_follows_the_leader(shared_cluster, unique):
    leader = shared_cluster.wait_for_leader()
    follower = shared_cluster.follower_of(leader)
    # The follower first, then the leader: the follower forwards and names the leader.
    endpoints = [shared_cluster.addrs[follower], shared_cluster.addrs[leader]]
    client = leasehold.Client(endpoints)
    lease = client.acquire(unique(), "alice", TTL)
    assert client._core.preferred() == 1, "the leader named in the answer is preferred"
    client.release(unique(), lease.token)
    only_follower = leasehold.Client([shared_cluster.addrs[follower]])
    lease = only_follower.acquire(unique(), "alice", TTL)
    only_follower.release(unique(), lease.token)


def test_fenced_records_gate_and_check(shared_cluster, unique):
    client = shared_cluster.client()
    lock, key, gate = unique("lock"), unique("record"), unique("gate")
    a = client.acquire(lock, "alice", TTL)
    assert client.check(lock, a.token) == leasehold.CheckResult(lock, True, a.token)
    written = client.put_record(key, lock, a.token, {"state": "captured", "amount": 1200})
    assert (written.key, written.lock, written.token) == (key, lock, a.token)
    record = client.get_record(key)
    assert record is not None
    assert record.value == {"state": "captured", "amount": 1200}
    assert (record.token, record.index) == (a.token, written.index)
    assert client.get_record(unique("never")) is None
    admitted = client.gate(gate, lock, a.token)
    assert (admitted.admitted, admitted.highest) == (True, a.token)

    client.release(lock, a.token)
    b = client.acquire(lock, "bob", TTL)
    assert b.token > a.token
    check = client.check(lock, a.token)
    assert (check.current, check.token, bool(check)) == (False, b.token, False)
    with pytest.raises(leasehold.StaleToken) as stale:
        client.put_record(key, lock, a.token, {"state": "refunded"})
    assert stale.value.current_token == b.token
    assert client.get_record(key).value["state"] == "captured", "the stale write changed nothing"
    client.gate(gate, lock, b.token)
    with pytest.raises(leasehold.StaleToken) as low:
        client.gate(gate, lock, a.token)
    assert low.value.highest == b.token
    other = client.acquire(unique("other-lock"), "carol", TTL)
    with pytest.raises(leasehold.LockMismatch):
        client.gate(gate, unique("other-lock"), other.token)


def test_fence_sql_refuses_a_stale_holders_write(shared_cluster, unique):
    """The SQL pattern of the README, with sqlite3 (named paramstyle)."""
    client = shared_cluster.client()
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER, fence INTEGER)")
    db.execute("INSERT INTO accounts VALUES (1, 100, 0)")

    def write(token_lease: leasehold.Lock, balance: int) -> int:
        fence = token_lease.fence_sql("fence", style="named")
        cursor = db.execute(
            f"UPDATE accounts SET balance = :balance, {fence.assignment} "
            f"WHERE id = :id AND {fence.predicate}",
            {"balance": balance, "id": 1, **fence.params},
        )
        return cursor.rowcount

    with client.lock(unique(), ttl=TTL, owner="alice") as a:
        assert write(a, 150) == 1
        stale = a
    with client.lock(unique(), ttl=TTL, owner="bob") as b:
        assert b.token > stale.token
        assert write(b, 175) == 1
        assert write(stale, 999) == 0, "a newer holder wrote: the old token is refused"
        assert write(b, 180) == 1, "<=: one holder may write again"
    assert db.execute("SELECT balance, fence FROM accounts").fetchone() == (180, b.token)


def test_errors_the_cluster_answers(shared_cluster, unique):
    client = shared_cluster.client(retry_budget=2)
    name = unique()
    with pytest.raises(leasehold.InvalidArgument) as invalid:
        client.acquire(name, "alice", 1.0)
    assert (invalid.value.status, invalid.value.field) == (400, "ttl_ms")
    with pytest.raises(leasehold.NotHeld):
        client.renew(name, 1)
    with pytest.raises(leasehold.NotHeld):
        client.release(name, 1)
    lease = client.acquire(name, "alice", TTL, request_id=unique("request"))
    with pytest.raises(leasehold.StaleToken) as stale:
        client.renew(name, lease.token + 1000)
    assert stale.value.current_token == lease.token
    with pytest.raises(leasehold.StaleToken):
        client.release(name, lease.token - 1)
    with pytest.raises(leasehold.RequestIdReused) as reused:
        client.acquire(unique("elsewhere"), "alice", TTL, request_id=unique("request"))
    assert reused.value.request_id == unique("request")
    with pytest.raises(leasehold.NoRecord):
        client.request("GET", f"/v1/records/{unique('none')}")
    with pytest.raises(leasehold.NotFound):
        client.request("GET", "/v1/no-such-endpoint")
    with pytest.raises(leasehold.MethodNotAllowed):
        client.request("DELETE", f"/v1/locks/{name}/acquire")
    with pytest.raises(leasehold.BodyTooLarge):
        client.put_record(unique("big"), name, lease.token, "x" * 70_000)
    with pytest.raises(leasehold.InvalidArgument) as too_big:
        client.put_record(unique("big"), name, lease.token, "x" * 5_000)
    assert too_big.value.field == "value"
    with pytest.raises(leasehold.InvalidArgument):
        client.list(limit=0)
    with pytest.raises(leasehold.NotMember) as not_member:
        client.remove_member(99)
    assert not_member.value.id == 99
    with pytest.raises(leasehold.AlreadyInitialized):
        client.request("POST", "/v1/cluster/init", {})
    with pytest.raises(leasehold.NoSnapshot):
        client.request("GET", "/v1/cluster/snapshot")
    leader = shared_cluster.wait_for_leader()
    media = httpx.post(
        f"{shared_cluster.url(leader)}/v1/locks/{name}/acquire",
        content=b"owner=alice",
        headers={"content-type": "text/plain"},
    )
    assert isinstance(
        leasehold.errors.error_from_body(media.status_code, media.json()),
        leasehold.UnsupportedMediaType,
    )
    client.release(name, lease.token)


def test_async_client_lifecycle(shared_cluster, unique):
    import asyncio

    async def main() -> None:
        async with shared_cluster.async_client() as client:
            lease = await client.acquire(unique(), "alice", TTL)
            with pytest.raises(leasehold.HeldByOther):
                await client.acquire(unique(), "bob", TTL)
            assert (await client.get(unique())).token == lease.token
            await client.renew(unique(), lease.token)
            assert (await client.check(unique(), lease.token)).current
            await client.put_record(unique("r"), unique(), lease.token, [1, 2])
            assert (await client.get_record(unique("r"))).value == [1, 2]
            await client.release(unique(), lease.token)
            assert await client.get(unique()) is None
            other = await client.acquire(unique(), "carol", TTL)
            with pytest.raises(leasehold.WaitTimeout):
                await client.acquire(unique(), "dave", TTL, wait=1)
            await client.release(unique(), other.token)

    asyncio.run(main())


def test_lock_delay_keeps_an_expired_lock_from_everyone_then_grants_it(shared_cluster, unique):
    client = shared_cluster.client()
    name = unique()
    delay = 2.0
    lease = client.acquire(name, "alice", 3.0, lock_delay=delay)
    # alice stops renewing: bound by the ttl plus a generous election's worth.
    give_up = time.monotonic() + 3.0 + 10
    while client.get(name) is not None:
        assert time.monotonic() < give_up, "the lease never expired"
        time.sleep(0.05)
    with pytest.raises(leasehold.LockDelayed) as caught:
        client.acquire(name, "bob", TTL)
    delayed = caught.value
    assert (delayed.status, delayed.name) == (409, name)
    delay_ticks = round(delay * 1000 / cluster.TICK_MS)
    assert delayed.delayed_until_tick is not None
    assert delayed.delayed_until_tick >= lease.deadline_tick + delay_ticks
    with pytest.raises(leasehold.LockDelayed):
        client.acquire(name, "alice", TTL)  # the expired holder too
    with pytest.raises(leasehold.HeldByOther) as refused:
        client.acquire_many([unique("free"), name], "carol", TTL)
    assert refused.value.conflicts == [
        leasehold.Conflict(name, "delayed", delayed_until_tick=delayed.delayed_until_tick)
    ]
    started = time.monotonic()
    granted = client.acquire(name, "bob", TTL, wait=delay + 10, lock_delay=delay)
    assert time.monotonic() - started < delay + 10
    assert granted.owner == "bob"
    assert granted.token > lease.token
    ttl_ticks = round(TTL * 1000 / cluster.TICK_MS)
    assert granted.deadline_tick >= delayed.delayed_until_tick + ttl_ticks, "granted before the end"
    client.release(name, granted.token)
    # bob's lease has a lock delay too, but a release ends it without one.
    assert client.acquire(name, "carol", TTL).owner == "carol"


def test_multi_acquire_takes_every_lock_under_one_token(shared_cluster, unique):
    client = shared_cluster.client()
    names = [unique("b"), unique("a"), unique("c")]
    leases = client.acquire_many(names, "transfer-9", TTL, request_id=unique("request"))
    assert (leases.names, leases.reacquired) == (names, False), "grants in the order asked"
    assert {g.token for g in leases.grants} == {leases.token}
    for name in names:
        view = client.get(name)
        assert (view.owner, view.token) == ("transfer-9", leases.token)
    again = client.acquire_many(names, "transfer-9", TTL)
    assert (again.token, again.reacquired) == (leases.token, True), "holds them all: same grants"
    retried = client.acquire_many(names, "transfer-9", TTL, request_id=unique("request"))
    assert retried.token == leases.token
    with pytest.raises(leasehold.InvalidArgument) as duplicate:
        client.acquire_many([unique("d"), unique("d")], "transfer-9", TTL)
    assert (duplicate.value.status, duplicate.value.field) == (400, "names")
    with pytest.raises(leasehold.StaleToken):
        client.release_many(names, leases.token + 1)
    assert client.get(names[0]).token == leases.token, "a refused release releases none"
    released = client.release_many(names, leases.token)
    assert (released.names, released.token, released.released) == (names, leases.token, True)
    assert all(client.get(name) is None for name in names)


def test_multi_acquire_refused_with_the_conflicts_then_granted_by_the_release(
    shared_cluster, unique
):
    client = shared_cluster.client()
    held, free = unique("held"), unique("free")
    alice = client.acquire(held, "alice", TTL)
    with pytest.raises(leasehold.HeldByOther) as caught:
        client.acquire_many([free, held], "bob", TTL)
    assert caught.value.status == 409
    [conflict] = caught.value.conflicts
    assert (conflict.name, conflict.reason, conflict.holder, conflict.token) == (
        held, "held", "alice", alice.token,
    )  # fmt: skip
    assert conflict.expires_in_ms is not None
    assert client.get(free) is None, "refused: nothing granted"

    versions: list[str] = []
    client._waiting.event_hooks["response"].append(lambda r: versions.append(r.http_version))
    outcome: dict[str, object] = {}

    def wait_for_both() -> None:
        try:
            outcome["leases"] = client.acquire_many([free, held], "bob", TTL, wait=20)
        except Exception as e:
            outcome["error"] = e

    waiter = threading.Thread(target=wait_for_both)
    waiter.start()
    give_up = time.monotonic() + 10
    while not any(w.owner == "bob" for w in client.get(held).waiters):
        assert time.monotonic() < give_up, "bob never queued"
        time.sleep(0.05)
    # The free lock is kept for bob, first in its queue, while he waits for the other.
    with pytest.raises(leasehold.Reserved) as reserved:
        client.acquire(free, "carol", TTL)
    assert (reserved.value.name, reserved.value.first_waiter) == (free, "bob")
    assert "leases" not in outcome, "granted while alice held one lock"
    client.release(held, alice.token)
    waiter.join(timeout=20)
    assert not waiter.is_alive()
    assert "error" not in outcome, outcome
    leases = outcome["leases"]
    assert isinstance(leases, leasehold.Leases)
    assert leases.token > alice.token
    assert [(g.name, g.owner, g.token) for g in leases.grants] == [
        (free, "bob", leases.token), (held, "bob", leases.token),
    ]  # fmt: skip
    assert versions == ["HTTP/2"], "the waiting multi-acquire went over HTTP/2"
    client.release_many([free, held], leases.token)


def test_async_client_multi_acquire_and_release(shared_cluster, unique):
    import asyncio

    async def main() -> None:
        async with shared_cluster.async_client() as client:
            names = [unique("x"), unique("y")]
            leases = await client.acquire_many(names, "alice", TTL, lock_delay=1)
            assert leases.names == names
            with pytest.raises(leasehold.HeldByOther) as caught:
                await client.acquire_many(names, "bob", TTL)
            assert [c.holder for c in caught.value.conflicts] == ["alice", "alice"]
            with pytest.raises(leasehold.WaitTimeout):
                await client.acquire_many(names, "bob", TTL, wait=1)
            released = await client.release_many(names, leases.token)
            assert released.released
            assert await client.get(names[0]) is None

    asyncio.run(main())


def test_lock_set_holds_every_lock_in_the_block_and_releases_them_together(shared_cluster, unique):
    client = shared_cluster.client()
    names = [unique("a"), unique("b")]
    with client.lock_many(names, ttl=TTL, owner="alice") as locks:
        assert locks.leases.names == names
        assert [client.get(n).token for n in names] == [locks.token] * 2
        assert 0 < locks.remaining() <= TTL
        with pytest.raises(leasehold.HeldByOther) as caught:
            client.lock_many([unique("c"), names[1]], ttl=TTL, owner="bob").acquire()
        assert [c.name for c in caught.value.conflicts] == [names[1]]
        assert client.get(unique("c")) is None
    assert all(client.get(n) is None for n in names), "released on exit"


def test_async_lock_set(shared_cluster, unique):
    import asyncio

    async def main() -> None:
        async with shared_cluster.async_client() as client:
            names = [unique("a"), unique("b")]

            async def hold_and_fail() -> None:
                async with client.lock_many(names, ttl=TTL, owner="alice") as locks:
                    assert (await client.get(names[0])).token == locks.token
                    raise RuntimeError("the block fails")

            with pytest.raises(RuntimeError, match="the block fails"):
                await hold_and_fail()
            assert await client.get(names[0]) is None, "released when the block raised too"

    asyncio.run(main())
