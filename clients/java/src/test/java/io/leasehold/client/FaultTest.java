package io.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.Timeout;

/** Faults injected by a proxy in front of the shared cluster's leader. */
@Timeout(60)
class FaultTest {
    private static String leader;

    @BeforeAll
    static void findLeader() throws Exception {
        TestCluster cluster = TestCluster.shared();
        leader = cluster.addrs.get(cluster.waitForLeader() - 1);
    }

    // Ensures an acquire whose answer was lost after the cluster applied it
    // is retried under the same request id and answered with that first
    // grant, not granted again (a second grant to the same owner would
    // answer reacquired).
    @Test
    void retryAfterADroppedAnswerReusesTheRequestId(TestInfo info) throws Exception {
        try (FaultProxy proxy = new FaultProxy(leader)) {
            Client client = Client.builder(List.of(proxy.addr())).build();
            String name = ClientTest.unique(info);
            proxy.dropAnswers.set(1);
            Lease lease = client.acquire(name, "a", ClientTest.TTL, AcquireOptions.none());
            assertEquals(0, proxy.dropAnswers.get(), "no answer was dropped");
            assertFalse(lease.grant().reacquired(), "the retry was granted again");
            LeaseView view = client.get(name).orElseThrow();
            assertEquals(lease.token(), view.token());
            assertEquals("a", view.owner());
        }
    }

    // Ensures a 503 overloaded is retried, no sooner than its Retry-After,
    // and that a budget shorter than that gives up with the last refusal.
    @Test
    void overloadedIsRetriedAfterItsRetryAfter(TestInfo info) throws Exception {
        try (FaultProxy proxy = new FaultProxy(leader)) {
            Client client = Client.builder(List.of(proxy.addr())).build();
            proxy.overloaded.set(1);
            long started = System.nanoTime();
            client.acquire(ClientTest.unique(info), "a", ClientTest.TTL, AcquireOptions.none());
            assertEquals(1, proxy.refused.get());
            Duration waited = Duration.ofNanos(System.nanoTime() - started);
            assertTrue(waited.compareTo(Duration.ofSeconds(1)) >= 0, "retried after " + waited);

            Client impatient = Client.builder(List.of(proxy.addr())).retryBudget(Duration.ofMillis(500)).build();
            proxy.overloaded.set(1);
            UnavailableException gaveUp = assertThrows(UnavailableException.class,
                    () -> impatient.acquire(ClientTest.unique(info), "a", ClientTest.TTL, AcquireOptions.none()));
            assertEquals(ErrorCode.OVERLOADED, gaveUp.code());
            assertEquals(503, gaveUp.status());
        }
    }
}
