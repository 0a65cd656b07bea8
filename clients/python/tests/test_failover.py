"""Leader crashes: a retried acquire (same request id) gets the original
grant from the new leader, and the client finds that leader by itself."""

from __future__ import annotations

import json
from typing import Callable

import httpx
import pytest

import leasehold

pytestmark = pytest.mark.timeout(90)

TTL = 30.0


class LoseTheFirstAcquireAnswer(httpx.HTTPTransport):
    """Sends every request for real, but the answer to the first acquire is
    'lost' after it was applied: `applied()` runs (it kills the leader) and
    the client sees a read error, as if the connection broke."""

    def __init__(self, applied: Callable[[], None]) -> None:
        super().__init__()
        self.applied = applied
        self.acquires: list[dict[str, object]] = []
        self.lost_answer: dict[str, object] | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        is_acquire = request.url.path.endswith("/acquire")
        if is_acquire:
            self.acquires.append(json.loads(request.content))
        response = super().handle_request(request)
        if is_acquire and self.lost_answer is None and response.status_code == 200:
            response.read()
            self.lost_answer = response.json()
            response.close()
            self.applied()
            raise httpx.ReadError("connection reset before the answer", request=request)
        return response


def test_retry_after_leader_kill_returns_the_same_token(make_cluster):
    cluster = make_cluster()
    leader = cluster.wait_for_leader()
    transport = LoseTheFirstAcquireAnswer(applied=lambda: cluster.kill(leader))
    client = leasehold.Client(cluster.endpoints(), transport=transport, retry_budget=30)

    lease = client.acquire("ledger", "worker-1", TTL)

    assert transport.lost_answer is not None, "the first answer was applied, then lost"
    assert len(transport.acquires) >= 2, "the client retried"
    assert len({a["request_id"] for a in transport.acquires}) == 1, "one request id per call"
    assert lease.token == transport.lost_answer["token"], "the retry got the original grant"
    assert lease.reacquired is False
    new_leader = cluster.wait_for_leader()
    assert new_leader != leader
    assert cluster.client().get("ledger").token == lease.token
    assert client.acquire("fresh", "worker-1", TTL).token > lease.token


def test_explicit_request_id_retry_after_leader_kill(make_cluster):
    cluster = make_cluster()
    client = cluster.client(retry_budget=30)
    original = client.acquire("ledger", "worker-1", TTL, request_id="payment-7f3a")
    other = client.acquire("other", "worker-1", TTL)
    leader = cluster.wait_for_leader()
    cluster.kill(leader)
    new_leader = cluster.wait_for_leader()

    retried = client.acquire("ledger", "worker-1", TTL, request_id="payment-7f3a")
    assert retried.token == original.token
    assert retried.token < other.token, "not a fresh grant"
    assert client._core.endpoints[client._core.preferred()].addr == cluster.addrs[new_leader]
    with pytest.raises(leasehold.RequestIdReused):
        client.acquire("elsewhere", "worker-1", TTL, request_id="payment-7f3a")

    # With the old leader dead, removing the other live node would leave no
    # reachable quorum: refused.
    alive = next(n for n in cluster.ids if n not in (leader, new_leader))
    with pytest.raises(leasehold.WouldLoseQuorum):
        client.remove_member(alive)
