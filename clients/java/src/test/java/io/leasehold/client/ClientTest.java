package io.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.Timeout;

/** The client against the shared 3-node cluster; every test uses lock names of its own. */
@Timeout(60)
class ClientTest {
    static final Duration TTL = Duration.ofSeconds(3);

    private static TestCluster cluster;
    private static Client client;

    @BeforeAll
    static void start() throws Exception {
        cluster = TestCluster.shared();
        client = cluster.client();
    }

    static String unique(TestInfo info) {
        return info.getDisplayName().replaceAll("[^A-Za-z]", "") + "-" + System.nanoTime();
    }

    // Ensures a guard's token fences: a second owner is refused while it is
    // held, and the next grant after its release carries a higher token.
    @Test
    void tokensIncreaseAcrossHolders(TestInfo info) throws Exception {
        String name = unique(info);
        Lock first = client.lock(name, LockOptions.ttl(TTL).withOwner("a"));
        ApiException held = assertThrows(ApiException.class, () -> client.acquire(name, "b", TTL, AcquireOptions.none()));
        assertEquals(ErrorCode.HELD, held.code());
        assertEquals(409, held.status());
        assertEquals("a", held.detail("holder").asText());
        first.close();
        assertEquals(LostReason.Kind.ENDED, first.lost().toCompletableFuture().get(1, TimeUnit.SECONDS).kind());
        try (Lock second = client.lock(name, LockOptions.ttl(TTL).withOwner("b"))) {
            assertTrue(second.token() > first.token(), second.token() + " after " + first.token());
        }
    }

    // Ensures waiting acquires are granted in the order they queued.
    @Test
    void waitingAcquiresAreFifo(TestInfo info) throws Exception {
        String name = unique(info);
        Lease holder = client.acquire(name, "holder", TTL, AcquireOptions.none());
        ExecutorService pool = Executors.newFixedThreadPool(2);
        try {
            List<String> order = new java.util.concurrent.CopyOnWriteArrayList<>();
            List<Future<?>> waiters = new java.util.ArrayList<>();
            for (String owner : List.of("first", "second")) {
                waiters.add(pool.submit(() -> {
                    Lease lease = client.acquire(name, owner, TTL, AcquireOptions.none().withWait(Duration.ofSeconds(20)));
                    order.add(owner);
                    client.release(name, lease.token());
                    return null;
                }));
                waitForWaiter(name, owner);
            }
            client.release(name, holder.token());
            for (Future<?> waiter : waiters) {
                waiter.get(20, TimeUnit.SECONDS);
            }
            assertEquals(List.of("first", "second"), order);
        } finally {
            pool.shutdownNow();
        }
    }

    private static void waitForWaiter(String name, String owner) throws InterruptedException {
        long giveUp = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (System.nanoTime() - giveUp < 0) {
            if (client.get(name).map(v -> v.waiters().contains(owner)).orElse(false)) {
                return;
            }
            Thread.sleep(20);
        }
        throw new AssertionError(owner + " never queued for " + name);
    }

    // Ensures the watchdog keeps a lease well past its ttl, under one token,
    // and that a safe lock is neither lost nor at risk meanwhile.
    @Test
    void watchdogKeepsTheLeasePastItsTtl(TestInfo info) throws Exception {
        String name = unique(info);
        try (Lock lock = client.lock(name, LockOptions.ttl(TTL))) {
            long firstDeadline = lock.validUntilNanos();
            assertThrows(TimeoutException.class,
                    () -> lock.lost().toCompletableFuture().get(2 * TTL.toMillis(), TimeUnit.MILLISECONDS));
            assertFalse(lock.isLost());
            assertFalse(lock.isAtRisk());
            assertTrue(lock.validUntilNanos() - firstDeadline > 0, "the safe deadline did not move");
            LeaseView view = client.get(name).orElseThrow();
            assertEquals(lock.token(), view.token());
            assertEquals(lock.owner(), view.owner());
        }
    }

    // Ensures a guard whose lease the cluster ended behind its back (released
    // by token) reports REVOKED with the cluster's code at its next renewal.
    @Test
    void lockRevokedByTheCluster(TestInfo info) throws Exception {
        String name = unique(info);
        Lock lock = client.lock(name, LockOptions.ttl(TTL));
        client.release(name, lock.token());
        LostReason lost = lock.lost().toCompletableFuture().get(TTL.toMillis(), TimeUnit.MILLISECONDS);
        assertEquals(LostReason.Kind.REVOKED, lost.kind());
        assertEquals(ErrorCode.NOT_HELD, lost.code());
        assertFalse(lock.isAtRisk(), "lost, no longer at risk");
        ApiException release = assertThrows(ApiException.class, lock::release);
        assertEquals(ErrorCode.NOT_HELD, release.code());
        lock.close(); // a lost lock closes quietly
    }

    // Ensures a retried acquire that names the same request id is answered
    // with the first grant, not a second one.
    @Test
    void requestIdAnswersARetryWithTheFirstGrant(TestInfo info) {
        String name = unique(info);
        AcquireOptions once = AcquireOptions.none().withRequestId(Client.newRequestId());
        Lease first = client.acquire(name, "a", TTL, once);
        Lease again = client.acquire(name, "a", TTL, once);
        assertEquals(first.token(), again.token());
        assertFalse(again.grant().reacquired());
        ApiException reused = assertThrows(ApiException.class, () -> client.acquire(name + "-other", "a", TTL, once));
        assertEquals(ErrorCode.REQUEST_ID_REUSED, reused.code());
    }

    // Ensures the client moves to the node that names itself leader,
    // whichever node it asked first.
    @Test
    void clientFollowsTheLeader(TestInfo info) throws Exception {
        int leader = cluster.waitForLeader();
        int follower = leader % cluster.addrs.size() + 1;
        List<String> endpoints = new java.util.ArrayList<>(List.of(cluster.addrs.get(follower - 1)));
        cluster.addrs.stream().filter(a -> !a.equals(endpoints.get(0))).forEach(endpoints::add);
        Client followed = Client.builder(endpoints).build();
        followed.acquire(unique(info), "a", TTL, AcquireOptions.none());
        assertEquals(cluster.addrs.get(leader - 1), followed.preferredEndpoint());
    }

    // Ensures a session keeps its locks past its ttl with one keepalive, and
    // that ending it on the cluster loses it once, for all its locks.
    @Test
    void sessionKeepsItsLocksAndLosesThemTogether(TestInfo info) throws Exception {
        String a = unique(info) + "-a";
        String b = unique(info) + "-b";
        try (Session session = client.openSession(LockOptions.ttl(TTL))) {
            session.lock(a, null);
            session.lock(b, null);
            assertThrows(TimeoutException.class,
                    () -> session.lost().toCompletableFuture().get(2 * TTL.toMillis(), TimeUnit.MILLISECONDS));
            assertEquals(2, client.getSession(session.id()).orElseThrow().locks().size());
            client.deleteSession(session.id());
            LostReason lost = session.lost().toCompletableFuture().get(TTL.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals(LostReason.Kind.REVOKED, lost.kind());
            assertEquals(ErrorCode.SESSION_NOT_FOUND, lost.code());
            assertTrue(client.get(a).isEmpty());
            assertTrue(client.get(b).isEmpty());
        }
    }

    // Ensures a multi-lock takes all its locks under one token or none.
    @Test
    void multiLockIsAllOrNone(TestInfo info) {
        String a = unique(info) + "-a";
        String b = unique(info) + "-b";
        Lease blocker = client.acquire(b, "other", TTL, AcquireOptions.none());
        ApiException held = assertThrows(ApiException.class,
                () -> client.lockMany(List.of(a, b), "mover", TTL, AcquireOptions.none()));
        assertEquals(ErrorCode.HELD, held.code());
        JsonNode conflicts = held.detail("conflicts");
        assertEquals(1, conflicts.size());
        assertEquals(b, conflicts.get(0).path("name").asText());
        assertTrue(client.get(a).isEmpty(), "a refused multi-lock took " + a);
        client.release(b, blocker.token());
        try (LockSet set = client.lockMany(List.of(a, b), "mover", TTL, AcquireOptions.none())) {
            for (Grant grant : set.leases().grants()) {
                assertEquals(set.token(), grant.token());
                assertEquals("mover", grant.owner());
            }
        }
        assertTrue(client.get(a).isEmpty());
        assertTrue(client.get(b).isEmpty());
    }

    // Ensures fenced records and gates admit the current token and refuse
    // the one before it.
    @Test
    void recordsAndGatesRefuseAStaleToken(TestInfo info) {
        String name = unique(info);
        String key = name + "-record";
        String gate = name + "-gate";
        assertTrue(client.getRecord(key).isEmpty());
        Lease old = client.acquire(name, "old", TTL, AcquireOptions.none());
        client.putRecord(key, name, old.token(), Map.of("balance", 10));
        client.passGate(gate, name, old.token());
        client.release(name, old.token());
        Lease current = client.acquire(name, "new", TTL, AcquireOptions.none());
        ApiException stale = assertThrows(ApiException.class, () -> client.putRecord(key, name, old.token(), 0));
        assertEquals(ErrorCode.STALE_TOKEN, stale.code());
        client.putRecord(key, name, current.token(), Map.of("balance", 20));
        FencedRecord record = client.getRecord(key).orElseThrow();
        assertEquals(current.token(), record.token());
        assertEquals(20, record.value().path("balance").asInt());
        client.passGate(gate, name, current.token());
        assertEquals(ErrorCode.STALE_TOKEN,
                assertThrows(ApiException.class, () -> client.passGate(gate, name, old.token())).code());
        assertFalse(client.check(name, old.token()));
    }

    // Ensures an overloaded node's Retry-After is honoured and stretched by
    // jitter of at most half again, and that pauses while there is no leader
    // grow from 25 ms to at most 500 ms, each from its upper half.
    @Test
    void backoffHonoursRetryAfterWithJitter() {
        java.util.Set<Duration> distinct = new java.util.HashSet<>();
        for (int i = 0; i < 50; i++) {
            Duration pause = new Backoff().overloaded(Duration.ofSeconds(2));
            assertTrue(pause.compareTo(Duration.ofSeconds(2)) >= 0 && pause.compareTo(Duration.ofSeconds(3)) <= 0,
                    pause.toString());
            distinct.add(pause);
        }
        assertTrue(distinct.size() > 1, "no jitter");
        Backoff backoff = new Backoff();
        Duration ceiling = Duration.ofMillis(25);
        for (int i = 0; i < 8; i++) {
            Duration pause = backoff.unavailable();
            assertTrue(pause.compareTo(ceiling.dividedBy(2)) >= 0 && pause.compareTo(ceiling) <= 0, pause.toString());
            ceiling = ceiling.multipliedBy(2).compareTo(Backoff.MAX_UNAVAILABLE_PAUSE) > 0
                    ? Backoff.MAX_UNAVAILABLE_PAUSE : ceiling.multipliedBy(2);
        }
    }
}
