package io.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Faults on a cluster of the test's own: a leader killed, every node stopped. */
@Timeout(90)
class FailoverTest {
    // Ensures a guard renews through a new leader after the old one is
    // killed (no loss, same token), and that a guard is at risk, then loses
    // its lock no later than its safe deadline, once every node is stopped;
    // the next holder's token is higher.
    @Test
    void guardThroughLeaderKillThenLostByTheSafeDeadline() throws Exception {
        try (TestCluster cluster = new TestCluster(3)) {
            Client client = cluster.client();
            // A follower may hold a request until a new leader is elected (up
            // to 3 s without a quorum): the ttl leaves room for that.
            Duration ttl = Duration.ofSeconds(6);
            Lock survivor = client.lock("survivor", LockOptions.ttl(ttl));
            cluster.kill(cluster.waitForLeader());
            // A ttl after the kill: the lease lived only through renewals the
            // new leader committed.
            assertThrows(TimeoutException.class,
                    () -> survivor.lost().toCompletableFuture().get(ttl.toMillis(), TimeUnit.MILLISECONDS));
            assertEquals(survivor.token(), client.get("survivor").orElseThrow().token());
            survivor.release();

            Lock lock = client.lock("stopped", LockOptions.ttl(ClientTest.TTL));
            cluster.signalAll("STOP");
            long deadline = lock.validUntilNanos();
            // At risk before lost: sampled while lost is still pending.
            CompletableFuture<Boolean> sawAtRisk = CompletableFuture.supplyAsync(() -> {
                boolean saw = false;
                while (true) {
                    boolean risk = lock.isAtRisk();
                    try {
                        lock.lost().toCompletableFuture().get(10, TimeUnit.MILLISECONDS);
                        return saw;
                    } catch (TimeoutException pending) {
                        saw |= risk;
                    } catch (InterruptedException | ExecutionException e) {
                        throw new IllegalStateException(e);
                    }
                }
            });
            LostReason lost = lock.lost().toCompletableFuture().get();
            long lostAt = System.nanoTime();
            // Scheduling is the only slack allowed; a watchdog that waited for
            // an attempt's timeout (6 s) or the retry budget would be seconds late.
            assertTrue(lostAt - deadline < Duration.ofMillis(500).toNanos(),
                    "lost " + Duration.ofNanos(lostAt - deadline) + " after the safe deadline");
            assertEquals(LostReason.Kind.EXPIRED, lost.kind());
            assertTrue(sawAtRisk.get(), "never at risk before it was lost");
            cluster.signalAll("CONT");
            Lease next = client.acquire("stopped", "next", ClientTest.TTL,
                    AcquireOptions.none().withWait(Duration.ofSeconds(10)));
            assertTrue(next.token() > lock.token(), next.token() + " after " + lock.token());
        }
    }
}
