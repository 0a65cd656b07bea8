package io.leasehold.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.leasehold.client.AcquireOptions;
import io.leasehold.client.ApiException;
import io.leasehold.client.Client;
import io.leasehold.client.Grant;
import io.leasehold.client.Lease;
import io.leasehold.client.LeaseholdException;
import io.leasehold.client.Lock;
import io.leasehold.client.LockOptions;
import io.leasehold.client.LockSet;
import io.leasehold.client.LostReason;
import io.leasehold.client.Session;
import io.leasehold.client.UnavailableException;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The Java client's conformance driver (clients/conformance/PROTOCOL.md): reads
 * commands as JSON lines on stdin, runs each through the client's public
 * API, concurrently, and writes one JSON line per answer on stdout. It holds
 * no lock logic of its own.
 */
public final class Driver {
    private static final ObjectMapper JSON = new ObjectMapper();

    /** What a handle names: a lock, a session, a lock under a session, or a multi-lock. */
    private interface Guard {
        /** Adds {@code token} (locks only), {@code lost}, {@code at_risk} and {@code safe_remaining_ms}. */
        void status(ObjectNode out);

        /** Completes when the guard is lost. */
        CompletableFuture<LostReason> lost();

        void unlock();
    }

    private record LockGuard(Lock lock) implements Guard {
        public void status(ObjectNode out) {
            out.put("token", lock.token()).put("lost", lock.isLost()).put("at_risk", lock.isAtRisk())
                    .put("safe_remaining_ms", lock.safeRemaining().toMillis());
        }

        public CompletableFuture<LostReason> lost() {
            return lock.lost().toCompletableFuture();
        }

        public void unlock() {
            lock.release();
        }
    }

    private record SessionGuard(Session session) implements Guard {
        public void status(ObjectNode out) {
            out.put("lost", session.isLost()).put("at_risk", session.isAtRisk())
                    .put("safe_remaining_ms", session.safeRemaining().toMillis());
        }

        public CompletableFuture<LostReason> lost() {
            return session.lost().toCompletableFuture();
        }

        public void unlock() {
            session.close();
        }
    }

    /** A lock under a session: it lives and is lost with the session. */
    private record SessionLock(Client client, Session session, String name, long token) implements Guard {
        public void status(ObjectNode out) {
            new SessionGuard(session).status(out);
            out.put("token", token);
        }

        public CompletableFuture<LostReason> lost() {
            return session.lost().toCompletableFuture();
        }

        public void unlock() {
            client.release(name, token);
        }
    }

    /** A multi-lock: no watchdog, safe until its ttl's deadline less a tenth. */
    private record MultiLock(LockSet set, Duration margin) implements Guard {
        long remainingNanos() {
            return set.leases().validUntilNanos(margin) - System.nanoTime();
        }

        public void status(ObjectNode out) {
            out.put("token", set.token()).put("lost", remainingNanos() <= 0).put("at_risk", false)
                    .put("safe_remaining_ms", TimeUnit.NANOSECONDS.toMillis(remainingNanos()));
        }

        public CompletableFuture<LostReason> lost() {
            LostReason expired = new LostReason(LostReason.Kind.EXPIRED, null, "the multi-lock's ttl has run out");
            return CompletableFuture.supplyAsync(() -> expired,
                    CompletableFuture.delayedExecutor(Math.max(0, remainingNanos()), TimeUnit.NANOSECONDS));
        }

        public void unlock() {
            set.close();
        }
    }

    /** The request could not be understood. */
    private static final class Invalid extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Invalid(String message) {
            super(message);
        }
    }

    private final Client client;
    private final PrintStream out;
    private final Map<String, Guard> guards = new ConcurrentHashMap<>();
    private final AtomicInteger handles = new AtomicInteger();

    private Driver(Client client, PrintStream out) {
        this.client = client;
        this.out = out;
    }

    private synchronized void write(JsonNode line) {
        out.println(line.toString());
        out.flush();
    }

    private String keep(Guard guard) {
        String handle = "h" + handles.incrementAndGet();
        guards.put(handle, guard);
        return handle;
    }

    private Guard guard(String handle) {
        Guard guard = guards.get(handle);
        if (guard == null) {
            throw new Invalid("no handle " + handle);
        }
        return guard;
    }

    private static Duration ms(JsonNode r, String field) {
        return Duration.ofMillis(r.path(field).asLong(0));
    }

    private static String text(JsonNode r, String field) {
        JsonNode value = r.get(field);
        return value == null || value.isNull() ? null : value.asText();
    }

    private static List<String> names(JsonNode r) {
        List<String> names = new ArrayList<>();
        r.path("names").forEach(n -> names.add(n.asText()));
        return names;
    }

    private ObjectNode serve(JsonNode r) throws InterruptedException, ExecutionException {
        ObjectNode answer = JSON.createObjectNode();
        String op = r.path("op").asText();
        switch (op) {
            case "lock" -> {
                LockOptions options = LockOptions.ttl(ms(r, "ttl_ms")).withOwner(text(r, "owner"))
                        .withWait(ms(r, "wait_ms"));
                if (r.has("drift_margin_ms")) {
                    options = options.withDriftMargin(ms(r, "drift_margin_ms"));
                }
                Lock lock = client.lock(r.path("name").asText(), options);
                answer.put("handle", keep(new LockGuard(lock))).put("token", lock.token()).put("owner", lock.owner());
            }
            case "guard" -> guard(r.path("handle").asText()).status(answer);
            case "wait_lost" -> {
                CompletableFuture<LostReason> lost = guard(r.path("handle").asText()).lost();
                try {
                    LostReason reason = lost.get(r.path("timeout_ms").asLong(), TimeUnit.MILLISECONDS);
                    answer.put("lost", true).put("reason", reason.kind().name().toLowerCase(java.util.Locale.ROOT));
                    if (reason.code() != null) {
                        answer.put("code", reason.code().wire());
                    } else {
                        answer.putNull("code");
                    }
                } catch (TimeoutException notYet) {
                    answer.put("lost", false).putNull("reason").putNull("code");
                }
            }
            case "unlock", "session_close" -> {
                String handle = r.path("handle").asText();
                Guard guard = guard(handle);
                guards.remove(handle);
                guard.unlock();
            }
            case "acquire" -> {
                AcquireOptions options = AcquireOptions.none().withWait(ms(r, "wait_ms"))
                        .withRequestId(text(r, "request_id"));
                Lease lease = client.acquire(r.path("name").asText(), r.path("owner").asText(), ms(r, "ttl_ms"), options);
                answer.put("token", lease.token()).put("ttl_ms", lease.grant().ttlMs());
            }
            case "renew" -> {
                Duration ttl = r.has("ttl_ms") ? ms(r, "ttl_ms") : null;
                Lease lease = client.renew(r.path("name").asText(), r.path("token").asLong(), ttl);
                answer.put("token", lease.token()).put("ttl_ms", lease.grant().ttlMs());
            }
            case "release" -> client.release(r.path("name").asText(), r.path("token").asLong());
            case "get" -> client.get(r.path("name").asText()).ifPresentOrElse(
                    view -> answer.putObject("lease").put("owner", view.owner()).put("token", view.token()),
                    () -> answer.putNull("lease"));
            case "session_open" -> {
                Session session = client.openSession(LockOptions.ttl(ms(r, "ttl_ms")).withOwner(text(r, "owner")));
                answer.put("handle", keep(new SessionGuard(session))).put("session", session.id());
            }
            case "session_lock" -> {
                if (!(guard(r.path("session").asText()) instanceof SessionGuard session)) {
                    throw new Invalid(r.path("session").asText() + " is not a session");
                }
                String name = r.path("name").asText();
                Grant grant = session.session().lock(name, ms(r, "wait_ms"));
                answer.put("handle", keep(new SessionLock(client, session.session(), name, grant.token())))
                        .put("token", grant.token());
            }
            case "multi_lock" -> {
                String owner = text(r, "owner") != null ? text(r, "owner") : Client.defaultOwner();
                LockSet set = client.lockMany(names(r), owner, ms(r, "ttl_ms"),
                        AcquireOptions.none().withWait(ms(r, "wait_ms")));
                ObjectNode tokens = JSON.createObjectNode();
                set.leases().grants().forEach(g -> tokens.put(g.name(), g.token()));
                answer.put("handle", keep(new MultiLock(set, ms(r, "ttl_ms").dividedBy(10)))).set("tokens", tokens);
            }
            case "record_write" -> client.putRecord(r.path("key").asText(), r.path("lock").asText(),
                    r.path("token").asLong(), r.get("value"));
            case "record_read" -> client.getRecord(r.path("key").asText()).ifPresentOrElse(
                    record -> answer.put("token", record.token()).set("value", record.value()),
                    () -> answer.putNull("value").putNull("token"));
            case "gate_pass" -> client.passGate(r.path("gate").asText(), r.path("lock").asText(),
                    r.path("token").asLong());
            default -> throw new Invalid("unknown op " + op);
        }
        return answer;
    }

    private static ObjectNode failure(Throwable error) {
        ObjectNode out = JSON.createObjectNode();
        if (error instanceof ApiException api) {
            out.put("kind", "api").put("code", api.code().wire()).put("status", api.status());
            return out.put("message", api.apiMessage());
        } else if (error instanceof UnavailableException unavailable) {
            out.put("kind", "unavailable");
            if (unavailable.code() != null) {
                out.put("code", unavailable.code().wire()).put("status", unavailable.status());
            } else {
                out.putNull("code").putNull("status");
            }
        } else {
            // Invalid requests, and refusals by the client before anything
            // was sent (a ttl or margin out of range).
            out.put("kind", "invalid").putNull("code").putNull("status");
        }
        return out.put("message", String.valueOf(error.getMessage()));
    }

    private void handle(JsonNode request) {
        ObjectNode answer;
        try {
            answer = serve(request);
            answer.put("ok", true);
        } catch (LeaseholdException | Invalid | IllegalArgumentException | ExecutionException e) {
            answer = JSON.createObjectNode().put("ok", false);
            answer.set("error", failure(e));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return;
        }
        answer.set("id", request.get("id"));
        write(answer);
    }

    public static void main(String[] args) throws IOException {
        List<String> endpoints = new ArrayList<>();
        for (String e : System.getenv().getOrDefault("LEASEHOLD_ENDPOINTS", "").split(",")) {
            if (!e.isBlank()) {
                endpoints.add(e.trim());
            }
        }
        Client.Builder builder = Client.builder(endpoints);
        String token = System.getenv("LEASEHOLD_TOKEN");
        if (token != null && !token.isEmpty()) {
            builder.token(token);
        }
        String budget = System.getenv("LEASEHOLD_RETRY_BUDGET_MS");
        if (budget != null && !budget.isEmpty()) {
            builder.retryBudget(Duration.ofMillis(Long.parseLong(budget)));
        }
        PrintStream stdout = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        Driver driver = new Driver(builder.build(), stdout);
        driver.write(JSON.createObjectNode().put("ready", true).put("client", "java").put("version", Client.VERSION));
        ExecutorService running = Executors.newCachedThreadPool(r -> {
            Thread thread = new Thread(r);
            thread.setDaemon(true);
            return thread;
        });
        BufferedReader lines = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = lines.readLine(); line != null; line = lines.readLine()) {
            JsonNode request;
            try {
                request = JSON.readTree(line);
            } catch (IOException bad) {
                ObjectNode answer = JSON.createObjectNode().putNull("id").put("ok", false);
                answer.set("error", failure(new Invalid(bad.getMessage())));
                driver.write(answer);
                continue;
            }
            if ("shutdown".equals(request.path("op").asText())) {
                // Requests still running (a long wait_lost) are cut off.
                ObjectNode answer = JSON.createObjectNode().put("ok", true);
                answer.set("id", request.get("id"));
                driver.write(answer);
                System.exit(0);
            }
            running.execute(() -> driver.handle(request));
        }
    }
}
