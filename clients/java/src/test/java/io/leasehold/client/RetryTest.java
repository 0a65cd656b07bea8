package io.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The retry loop's failover against fake nodes (no cluster), with a zero
 * retry budget: it affords no pause, so only tries taken at once are made.
 */
@Timeout(30)
class RetryTest {
    static final Duration TTL = Duration.ofSeconds(10);
    static final String GRANT = "{\"name\":\"n\",\"owner\":\"o\",\"token\":57,\"ttl_ms\":10000,"
            + "\"expires_in_ms\":10000,\"deadline_tick\":172,\"reacquired\":false}";

    /** A node that grants every acquire or, once told of a leader, answers 503 naming it; it counts the tries. */
    static final class FakeNode implements AutoCloseable {
        final HttpServer server;
        final AtomicInteger tries = new AtomicInteger();
        volatile String leader;

        FakeNode() throws IOException {
            server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
            server.createContext("/", this::answer);
            server.start();
        }

        String addr() {
            return "127.0.0.1:" + server.getAddress().getPort();
        }

        /** Answers 503 not_leader naming {@code other} from now on. */
        void naming(FakeNode other) {
            leader = other.addr();
        }

        private void answer(HttpExchange exchange) throws IOException {
            tries.incrementAndGet();
            try (InputStream in = exchange.getRequestBody()) {
                in.readAllBytes();
            }
            String named = leader;
            String body = GRANT;
            int status = 200;
            exchange.getResponseHeaders().set("content-type", "application/json");
            if (named != null) {
                exchange.getResponseHeaders().set(Client.LEADER_ADDR_HEADER, named);
                exchange.getResponseHeaders().set("retry-after", "1");
                body = "{\"error\":{\"code\":\"not_leader\",\"message\":\"not the leader\"}}";
                status = 503;
            }
            byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(status, bytes.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(bytes);
            }
        }

        @Override
        public void close() {
            server.stop(0);
        }
    }

    private final List<FakeNode> nodes = new java.util.ArrayList<>();

    private FakeNode node() throws IOException {
        FakeNode node = new FakeNode();
        nodes.add(node);
        return node;
    }

    @AfterEach
    void stopNodes() {
        nodes.forEach(FakeNode::close);
    }

    /** A local address nothing listens on: connecting to it is refused. */
    private static String refusingAddr() throws IOException {
        try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return "127.0.0.1:" + socket.getLocalPort();
        }
    }

    private static Client noPauseClient(String... endpoints) {
        return Client.builder(List.of(endpoints)).retryBudget(Duration.ZERO).build();
    }

    // Ensures a node that refuses the connection (down, as a crashed leader)
    // sends the call to the next one at once, without a pause.
    @Test
    void refusedNodeIsLeftForTheNextAtOnce() throws Exception {
        FakeNode good = node();
        Lease lease = noPauseClient(refusingAddr(), good.addr()).acquire("n", "o", TTL, AcquireOptions.none());
        assertEquals(57, lease.token());
        assertEquals(1, good.tries.get());
    }

    // Ensures a 503 naming another of the client's nodes as leader is
    // followed at once, without a pause.
    @Test
    void namedLeaderIsFollowedAtOnce() throws Exception {
        FakeNode follower = node();
        FakeNode leader = node();
        follower.naming(leader);
        Lease lease = noPauseClient(follower.addr(), leader.addr()).acquire("n", "o", TTL, AcquireOptions.none());
        assertEquals(57, lease.token());
        assertEquals(List.of(1, 1), List.of(follower.tries.get(), leader.tries.get()));
    }

    // Ensures nodes naming each other are each tried once, then the call
    // pauses (which a zero budget cannot afford): they cannot make it spin.
    @Test
    void nodesNamingEachOtherAreEachTriedOnceBeforeAPause() throws Exception {
        FakeNode first = node();
        FakeNode second = node();
        first.naming(second);
        second.naming(first);
        Client client = noPauseClient(first.addr(), second.addr());
        UnavailableException failure = assertThrows(UnavailableException.class,
                () -> client.acquire("n", "o", TTL, AcquireOptions.none()));
        assertEquals(ErrorCode.NOT_LEADER, failure.code());
        assertEquals(List.of(1, 1), List.of(first.tries.get(), second.tries.get()));
    }
}
