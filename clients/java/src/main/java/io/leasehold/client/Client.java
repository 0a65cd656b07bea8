package io.leasehold.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.net.ConnectException;
import java.net.InetAddress;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.channels.UnresolvedAddressException;
import java.nio.charset.StandardCharsets;
import java.security.cert.CertPathValidatorException;
import java.security.cert.CertificateException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLHandshakeException;

/**
 * A client of one leasehold cluster, safe for concurrent use.
 *
 * <p>Every call goes through one retry loop: the same body (so the same
 * request id) on every try; the node named in {@code x-leasehold-leader-addr}
 * first, the next one after a failure (at once after a refused connection or
 * a 503 naming another leader, once per other node between pauses); pauses
 * that grow while no node answers and honour {@code Retry-After} (with
 * jitter) when a node is overloaded; until the retry budget is spent
 * ({@link UnavailableException}). A node whose certificate the TLS handshake
 * refuses is the exception: {@link UnavailableException} is thrown at once,
 * neither retried nor tried on another node.
 *
 * <p>HTTP/2: {@code java.net.http} speaks HTTP/2 to https endpoints
 * (negotiated by ALPN), so there every request, waiting acquires included,
 * shares one connection per node. To http endpoints it would only reach
 * HTTP/2 by the HTTP/1.1 {@code Upgrade: h2c} dance, which leasehold nodes do
 * not offer (they take h2c by prior knowledge only), so there this client
 * speaks HTTP/1.1 and each waiting acquire holds a connection of its own.
 */
public final class Client {
    /** This client's version. */
    public static final String VERSION = "0.1.0";
    /** How long one call keeps retrying by default. */
    public static final Duration DEFAULT_RETRY_BUDGET = Duration.ofSeconds(10);
    /** How long one try of a call may take, beyond the time it may wait in a queue. */
    static final Duration ATTEMPT_TIMEOUT = Duration.ofSeconds(6);
    static final String LEADER_ADDR_HEADER = "x-leasehold-leader-addr";

    static final ObjectMapper JSON = new ObjectMapper();

    private final List<URI> endpoints;
    private final List<String> authorities;
    private final HttpClient http;
    private final String token;
    private final Duration retryBudget;
    /** The endpoint tried first: the leader, as far as known. */
    private final AtomicInteger preferred = new AtomicInteger();

    private Client(Builder builder) {
        List<URI> uris = new ArrayList<>();
        List<String> hosts = new ArrayList<>();
        for (String e : builder.endpoints) {
            String raw = e.trim();
            if (!raw.contains("://")) {
                raw = (builder.sslContext != null ? "https://" : "http://") + raw;
            }
            URI uri;
            try {
                uri = URI.create(raw);
            } catch (IllegalArgumentException bad) {
                throw new IllegalArgumentException("invalid endpoint " + e, bad);
            }
            boolean scheme = "http".equals(uri.getScheme()) || "https".equals(uri.getScheme());
            if (!scheme || uri.getRawAuthority() == null || !(uri.getRawPath() == null || uri.getRawPath().isEmpty()
                    || "/".equals(uri.getRawPath()))) {
                throw new IllegalArgumentException("invalid endpoint " + e);
            }
            uris.add(URI.create(uri.getScheme() + "://" + uri.getRawAuthority()));
            hosts.add(uri.getRawAuthority());
        }
        if (uris.isEmpty()) {
            throw new IllegalArgumentException("no endpoints");
        }
        this.endpoints = List.copyOf(uris);
        this.authorities = List.copyOf(hosts);
        HttpClient.Builder http = HttpClient.newBuilder()
                .connectTimeout(Duration.ofSeconds(2))
                // Endpoints are nodes (or proxies named on purpose): never a
                // proxy from the system properties.
                .proxy(HttpClient.Builder.NO_PROXY)
                .followRedirects(HttpClient.Redirect.NEVER);
        if (builder.sslContext != null) {
            http.sslContext(builder.sslContext).version(HttpClient.Version.HTTP_2);
        } else {
            http.version(HttpClient.Version.HTTP_1_1);
        }
        this.http = http.build();
        this.token = builder.token;
        this.retryBudget = builder.retryBudget;
    }

    /** A builder of a client of the cluster whose nodes are {@code endpoints} ("host:port" or "scheme://host:port"). */
    public static Builder builder(List<String> endpoints) {
        return new Builder(endpoints);
    }

    /** The options of a {@link Client}. */
    public static final class Builder {
        private final List<String> endpoints;
        private String token;
        private SSLContext sslContext;
        private Duration retryBudget = DEFAULT_RETRY_BUDGET;

        private Builder(List<String> endpoints) {
            this.endpoints = List.copyOf(endpoints);
        }

        /** Sent as {@code authorization: Bearer <token>} on every request. */
        public Builder token(String token) {
            this.token = token;
            return this;
        }

        /** TLS for https endpoints; endpoints without a scheme then become https. */
        public Builder sslContext(SSLContext sslContext) {
            this.sslContext = sslContext;
            return this;
        }

        /** How long one call keeps retrying (a waiting acquire gets its wait on top); 10 s by default. */
        public Builder retryBudget(Duration retryBudget) {
            this.retryBudget = retryBudget;
            return this;
        }

        public Client build() {
            return new Client(this);
        }
    }

    private static final AtomicLong REQUEST_COUNTER = new AtomicLong();
    private static final long PROCESS_STARTED = System.currentTimeMillis();

    /** A request id unique to this process run: pid, start time and a counter. */
    public static String newRequestId() {
        return Long.toHexString(ProcessHandle.current().pid()) + "-" + Long.toHexString(PROCESS_STARTED) + "-"
                + Long.toHexString(REQUEST_COUNTER.incrementAndGet());
    }

    /** A fresh owner id, "hostname-pid-random", different for every call. */
    public static String defaultOwner() {
        String host;
        try {
            host = InetAddress.getLocalHost().getHostName().replaceAll("[^\\x21-\\x7e]", "");
        } catch (IOException unknown) {
            host = "";
        }
        if (host.isEmpty()) {
            host = "host";
        }
        if (host.length() > 64) {
            host = host.substring(0, 64);
        }
        return host + "-" + ProcessHandle.current().pid() + "-"
                + String.format("%016x", ThreadLocalRandom.current().nextLong());
    }

    // ---- the retry loop -------------------------------------------------

    /** A decoded 2xx answer and the instant its call started ({@link System#nanoTime()}). */
    record Answer(JsonNode body, long startedNanos) {
    }

    private record Reply(int status, String leaderAddr, Duration retryAfter, byte[] body) {
    }

    /**
     * Sends one request, following the leader and retrying unavailability
     * until the retry budget (plus {@code wait}) is spent, with the same body,
     * so the same request id, on every try. {@code wait} is how long the
     * server may legitimately hold the request (a queued acquire).
     * {@code cutoffNanos} (a {@link System#nanoTime()}, 0 for none) cuts
     * every try and pause off: the watchdog's safe deadline.
     *
     * <p>Returns the instant the call started, no later than the send of its
     * first attempt: a retry may be answered from the request-id record of an
     * earlier attempt, whose commit came after the first send, never before
     * it, so that instant is a safe anchor.
     */
    Answer call(String method, String path, JsonNode body, Duration wait, long cutoffNanos)
            throws InterruptedException {
        long started = System.nanoTime();
        long giveUp = started + retryBudget.toNanos() + wait.toNanos();
        byte[] payload;
        try {
            payload = body == null ? null : JSON.writeValueAsBytes(body);
        } catch (IOException unencodable) {
            throw new IllegalArgumentException("cannot encode the request: " + unencodable.getMessage(), unencodable);
        }
        Backoff pauses = new Backoff();
        // Tries left before the next pause that go to another node at once:
        // one refused the connection (the request never reached it: the node
        // is down, as its leader is after a crash) or named another leader in
        // its 503. At most one per other node between pauses, so nodes that
        // name each other, or all refusing, cannot make it spin.
        int sweep = endpoints.size() - 1;
        int atOnce = sweep;
        while (true) {
            int node = Math.floorMod(preferred.get(), endpoints.size());
            long timeout = ATTEMPT_TIMEOUT.plus(wait).toNanos();
            if (cutoffNanos != 0) {
                timeout = Math.min(timeout, cutoffNanos - System.nanoTime());
                if (timeout <= 0) {
                    throw new UnavailableException("no answer before the deadline", null, null);
                }
            }
            UnavailableException failure;
            Duration pause;
            Reply reply;
            try {
                reply = send(node, method, path, payload, timeout);
            } catch (IOException | TimeoutException | ExecutionException broken) {
                reply = null;
                String why = broken.getMessage() != null ? broken.getMessage() : broken.getClass().getSimpleName();
                if (untrusted(broken)) {
                    // Not retried, nor tried on another node: every node
                    // shares one CA, so every node would be refused alike,
                    // and an untrusted certificate may be an impostor's.
                    throw new UnavailableException(endpoints.get(node) + ": untrusted certificate: " + why, null, null);
                }
                failure = new UnavailableException(endpoints.get(node) + ": " + why, null, null);
                // Unreachable, refused or timed out: try the next node.
                moveOnFrom(node);
                if (connectFailed(broken) && atOnce > 0) {
                    atOnce--;
                    continue;
                }
                pause = pauses.unavailable();
                if (System.nanoTime() + pause.toNanos() - giveUp > 0) {
                    throw failure;
                }
                sleep(pause, cutoffNanos);
                atOnce = sweep;
                continue;
            }
            if (reply.status != 503) {
                int leader = namedLeader(reply);
                preferred.set(leader >= 0 ? leader : node);
                return new Answer(decode(reply), started);
            }
            ApiException refusal = apiError(reply);
            failure = new UnavailableException(refusal.getMessage(), refusal.code(), 503);
            if (refusal.code() == ErrorCode.OVERLOADED) {
                // The node sheds load: leave it alone as long as it asks, and
                // let the others take the next try.
                moveOnFrom(node);
                pause = pauses.overloaded(reply.retryAfter);
            } else {
                // A node that names itself leader yet cannot commit may be cut
                // off from the others (openraft has no CheckQuorum): follow a
                // leader named elsewhere, else try the next node.
                int leader = namedLeader(reply);
                if (leader >= 0 && leader != node) {
                    preferred.set(leader);
                    if (atOnce > 0) {
                        atOnce--;
                        continue;
                    }
                } else {
                    moveOnFrom(node);
                }
                pause = pauses.unavailable();
            }
            if (System.nanoTime() + pause.toNanos() - giveUp > 0) {
                throw failure;
            }
            sleep(pause, cutoffNanos);
            atOnce = sweep;
        }
    }

    /**
     * Whether a try failed to connect (refused, no route, no such host, the
     * connect timed out): the request never reached the node.
     * {@code java.net.http} reports it as a {@link ConnectException} or
     * {@link HttpConnectTimeoutException}, wrapped by the future's
     * {@link ExecutionException}.
     */
    private static boolean connectFailed(Throwable broken) {
        for (Throwable e = broken; e != null; e = e.getCause()) {
            if (e instanceof ConnectException || e instanceof HttpConnectTimeoutException
                    || e instanceof UnresolvedAddressException) {
                return true;
            }
        }
        return false;
    }

    /**
     * Whether a try failed because the TLS handshake refused the node's
     * certificate (it does not chain to a trusted CA, or names another host).
     * {@code java.net.http} reports it as an {@link SSLHandshakeException}
     * (wrapped by the future's {@link ExecutionException}, or in an
     * {@link IOException}) caused by a {@link CertificateException}.
     */
    private static boolean untrusted(Throwable broken) {
        for (Throwable e = broken; e != null; e = e.getCause()) {
            if (e instanceof CertificateException || e instanceof CertPathValidatorException) {
                return true;
            }
        }
        return false;
    }

    /** Sleeps {@code pause}, but not past {@code cutoffNanos} (when not 0). */
    private static void sleep(Duration pause, long cutoffNanos) throws InterruptedException {
        long nanos = pause.toNanos();
        if (cutoffNanos != 0) {
            nanos = Math.min(nanos, cutoffNanos - System.nanoTime());
        }
        if (nanos > 0) {
            TimeUnit.NANOSECONDS.sleep(nanos);
        }
    }

    /** One try of a request to one node, bounded by {@code timeoutNanos} as a whole. */
    private Reply send(int node, String method, String path, byte[] payload, long timeoutNanos)
            throws IOException, InterruptedException, TimeoutException, ExecutionException {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(endpoints.get(node) + path))
                .timeout(Duration.ofNanos(timeoutNanos))
                .method(method, payload == null ? HttpRequest.BodyPublishers.noBody()
                        : HttpRequest.BodyPublishers.ofByteArray(payload));
        if (payload != null) {
            request.header("content-type", "application/json");
        }
        if (token != null) {
            request.header("authorization", "Bearer " + token);
        }
        CompletableFuture<HttpResponse<byte[]>> sent =
                http.sendAsync(request.build(), HttpResponse.BodyHandlers.ofByteArray());
        HttpResponse<byte[]> response;
        try {
            response = sent.get(timeoutNanos, TimeUnit.NANOSECONDS);
        } catch (InterruptedException | TimeoutException gaveUp) {
            // Closes the exchange, which gives up a place in a queue.
            sent.cancel(true);
            throw gaveUp;
        }
        Duration retryAfter = response.headers().firstValue("retry-after").flatMap(Client::seconds).orElse(null);
        return new Reply(response.statusCode(), response.headers().firstValue(LEADER_ADDR_HEADER).orElse(null),
                retryAfter, response.body());
    }

    /** A Retry-After in whole seconds, the form nodes send. */
    private static Optional<Duration> seconds(String value) {
        try {
            long seconds = Long.parseLong(value.trim());
            return seconds > 0 ? Optional.of(Duration.ofSeconds(seconds)) : Optional.empty();
        } catch (NumberFormatException notSeconds) {
            return Optional.empty();
        }
    }

    private int namedLeader(Reply reply) {
        return reply.leaderAddr == null ? -1 : authorities.indexOf(reply.leaderAddr);
    }

    /** Prefers the endpoint after {@code node}, unless another call already moved the preference. */
    private void moveOnFrom(int node) {
        preferred.compareAndSet(node, (node + 1) % endpoints.size());
    }

    private static JsonNode decode(Reply reply) {
        if (reply.status < 200 || reply.status >= 300) {
            throw apiError(reply);
        }
        try {
            return reply.body.length == 0 ? JSON.createObjectNode() : JSON.readTree(reply.body);
        } catch (IOException bad) {
            throw new LeaseholdException("unexpected answer: " + bad.getMessage(), bad);
        }
    }

    /** The error body of an answer; one that is not a leasehold error keeps its status as {@link ErrorCode#UNKNOWN}. */
    private static ApiException apiError(Reply reply) {
        try {
            JsonNode error = JSON.readTree(reply.body).get("error");
            if (error != null && error.isObject()) {
                return new ApiException(reply.status, ErrorCode.fromWire(error.path("code").asText()),
                        error.path("message").asText(), error);
            }
        } catch (IOException notJson) {
            // Not a leasehold error body: kept below as text.
        }
        String text = new String(reply.body, StandardCharsets.UTF_8);
        return new ApiException(reply.status, ErrorCode.UNKNOWN, text.substring(0, Math.min(200, text.length())), null);
    }

    /** One path segment, percent-encoded (a lock name may hold '/'). */
    static String segment(String s) {
        return URLEncoder.encode(s, StandardCharsets.UTF_8).replace("+", "%20");
    }

    static long wholeMs(Duration d) {
        return d == null ? 0 : d.toMillis();
    }

    /** Blocking calls report an interrupt as this, with the thread's flag set again. */
    static LeaseholdException interrupted(InterruptedException e) {
        Thread.currentThread().interrupt();
        return new LeaseholdException("interrupted", e);
    }

    private Answer call(String method, String path, JsonNode body, Duration wait) {
        try {
            return call(method, path, body, wait, 0);
        } catch (InterruptedException e) {
            throw interrupted(e);
        }
    }

    // ---- locks ------------------------------------------------------------

    /**
     * Acquires {@code name} for {@code owner} with a lease of {@code ttl}
     * (whole ms, 3 s to 1 h), waiting in its queue when {@code options} ask
     * to. Throws {@link ApiException} ({@code held} without a wait,
     * {@code wait_timeout}, {@code lock_delayed}, {@code request_id_reused},
     * {@code full}, {@code invalid_argument}) or {@link UnavailableException}.
     */
    public Lease acquire(String name, String owner, Duration ttl, AcquireOptions options) {
        return acquireFor(name, owner, wholeMs(ttl), 0, 0, options);
    }

    /** The acquire of {@code name}, its lease living by its ttl or (when {@code session} is not 0) a session. */
    Lease acquireFor(String name, String owner, long ttlMs, long session, long seq, AcquireOptions options) {
        ObjectNode body = acquireBody(owner, ttlMs, session, seq, options);
        Answer answer = call("POST", "/v1/locks/" + segment(name) + "/acquire", body, options.waitOrZero());
        return new Lease(Grant.from(answer.body()), answer.startedNanos());
    }

    private static ObjectNode acquireBody(String owner, long ttlMs, long session, long seq, AcquireOptions options) {
        ObjectNode body = JSON.createObjectNode().put("owner", owner);
        if (session != 0) {
            body.put("session", session).put("seq", seq);
        } else {
            body.put("ttl_ms", ttlMs);
        }
        if (wholeMs(options.maxWait()) > 0) {
            body.put("wait_ms", wholeMs(options.maxWait()));
        }
        if (wholeMs(options.lockDelay()) > 0) {
            body.put("lock_delay_ms", wholeMs(options.lockDelay()));
        }
        return body.put("request_id", options.requestId() != null ? options.requestId() : newRequestId());
    }

    /** Restarts the lease held under {@code token}, with {@code ttl} (null: the grant's). */
    public Lease renew(String name, long token, Duration ttl) {
        try {
            return renew(name, token, ttl, 0);
        } catch (InterruptedException e) {
            throw interrupted(e);
        }
    }

    Lease renew(String name, long token, Duration ttl, long cutoffNanos) throws InterruptedException {
        ObjectNode body = JSON.createObjectNode().put("token", token).put("request_id", newRequestId());
        if (ttl != null) {
            body.put("ttl_ms", wholeMs(ttl));
        }
        Answer answer = call("POST", "/v1/locks/" + segment(name) + "/renew", body, Duration.ZERO, cutoffNanos);
        return new Lease(Grant.from(answer.body()), answer.startedNanos());
    }

    /** Releases the lock held under {@code token} (handing it to its first waiter). */
    public void release(String name, long token) {
        ObjectNode body = JSON.createObjectNode().put("token", token).put("request_id", newRequestId());
        call("POST", "/v1/locks/" + segment(name) + "/release", body, Duration.ZERO);
    }

    /** The lease of {@code name} (linearizable), empty when the lock is free. */
    public Optional<LeaseView> get(String name) {
        try {
            return Optional.of(LeaseView.from(call("GET", "/v1/locks/" + segment(name), null, Duration.ZERO).body()));
        } catch (ApiException e) {
            if (e.code() == ErrorCode.NOT_HELD) {
                return Optional.empty();
            }
            throw e;
        }
    }

    /**
     * Acquires {@code name} and returns a {@link Lock} whose watchdog renews
     * its lease every ttl/3 until it is closed. When the acquire took so long
     * (a queue wait, retries) that less than a renewal interval is left before
     * the safe deadline, it renews once first, to re-anchor the lease.
     */
    public Lock lock(String name, LockOptions options) {
        return Lock.acquire(this, name, options);
    }

    // ---- several locks ------------------------------------------------------

    /**
     * Acquires every lock of {@code names} (1–64 distinct) for {@code owner}
     * in one log entry, under one token, or none: {@code held}, whose
     * {@code conflicts} name every lock in the way. With a wait, waits until
     * all can be granted together, holding none meanwhile.
     */
    public Leases acquireMany(List<String> names, String owner, Duration ttl, AcquireOptions options) {
        return acquireManyFor(names, owner, wholeMs(ttl), 0, 0, options);
    }

    Leases acquireManyFor(List<String> names, String owner, long ttlMs, long session, long seq,
            AcquireOptions options) {
        ObjectNode body = acquireBody(owner, ttlMs, session, seq, options);
        ArrayNode list = body.putArray("names");
        names.forEach(list::add);
        Answer answer = call("POST", "/v1/multi/acquire", body, options.waitOrZero());
        return Leases.from(answer.body(), answer.startedNanos());
    }

    /** Releases every lock of {@code names}, all held under {@code token}, in one entry, or none. */
    public void releaseMany(List<String> names, long token) {
        ObjectNode body = JSON.createObjectNode().put("token", token).put("request_id", newRequestId());
        ArrayNode list = body.putArray("names");
        names.forEach(list::add);
        call("POST", "/v1/multi/release", body, Duration.ZERO);
    }

    /** {@link #acquireMany}, as a guard that releases the set when closed. */
    public LockSet lockMany(List<String> names, String owner, Duration ttl, AcquireOptions options) {
        return new LockSet(this, acquireMany(names, owner, ttl, options));
    }

    // ---- sessions -------------------------------------------------------------

    /** Opens a session ({@code POST /v1/sessions}); the lease's anchor is in {@code startedNanos}. */
    Answer createSession(String owner, long ttlMs) {
        ObjectNode body = JSON.createObjectNode().put("owner", owner).put("ttl_ms", ttlMs)
                .put("request_id", newRequestId());
        return call("POST", "/v1/sessions", body, Duration.ZERO);
    }

    /** Restarts a session's deadline; {@code seq} its number in the session's sequence. */
    long keepAlive(long session, long seq, long cutoffNanos) throws InterruptedException {
        ObjectNode body = JSON.createObjectNode().put("request_id", newRequestId()).put("seq", seq);
        return call("POST", "/v1/sessions/" + session + "/keepalive", body, Duration.ZERO, cutoffNanos).startedNanos();
    }

    /** Ends a session, releasing every lock under it; returns the names released. */
    public List<String> deleteSession(long session) {
        List<String> released = new ArrayList<>();
        // A request id, like every mutation: a retry after a lost answer (the
        // session already deleted) gets the first answer again, not a 404.
        call("DELETE", "/v1/sessions/" + session + "?request_id=" + newRequestId(), null, Duration.ZERO)
                .body().path("released")
                .forEach(n -> released.add(n.asText()));
        return released;
    }

    /** A session with its locks, empty when it is gone. */
    public Optional<SessionView> getSession(long session) {
        try {
            return Optional.of(SessionView.from(call("GET", "/v1/sessions/" + session, null, Duration.ZERO).body()));
        } catch (ApiException e) {
            if (e.code() == ErrorCode.SESSION_NOT_FOUND) {
                return Optional.empty();
            }
            throw e;
        }
    }

    /** Opens a session and starts its keepalive watchdog ({@code options.wait} is not used). */
    public Session openSession(LockOptions options) {
        return Session.open(this, options);
    }

    // ---- fence ---------------------------------------------------------------

    /** Whether {@code token} is the current token of {@code lock} (linearizable). */
    public boolean check(String lock, long token) {
        ObjectNode body = JSON.createObjectNode().put("lock", lock).put("token", token);
        return call("POST", "/v1/fence/check", body, Duration.ZERO).body().path("current").asBoolean();
    }

    /**
     * Writes {@code value} (anything Jackson encodes) under {@code key} if
     * {@code token} is the current token of {@code lock}; {@code stale_token}
     * otherwise. Returns the index of the entry that wrote it.
     */
    public long putRecord(String key, String lock, long token, Object value) {
        ObjectNode body = JSON.createObjectNode().put("lock", lock).put("token", token);
        body.set("value", JSON.valueToTree(value));
        body.put("request_id", newRequestId());
        return call("PUT", "/v1/records/" + segment(key), body, Duration.ZERO).body().path("index").asLong();
    }

    /** The record {@code key}, empty when it was never written. */
    public Optional<FencedRecord> getRecord(String key) {
        try {
            return Optional.of(FencedRecord.from(call("GET", "/v1/records/" + segment(key), null, Duration.ZERO).body()));
        } catch (ApiException e) {
            if (e.code() == ErrorCode.NO_RECORD) {
                return Optional.empty();
            }
            throw e;
        }
    }

    /**
     * Passes {@code token} of {@code lock} through the gate of {@code resource}:
     * admitted when it is at least the highest admitted so far;
     * {@code stale_token} otherwise, {@code lock_mismatch} for another lock's.
     */
    public void passGate(String resource, String lock, long token) {
        ObjectNode body = JSON.createObjectNode().put("lock", lock).put("token", token).put("request_id", newRequestId());
        call("POST", "/v1/fence/gate/" + segment(resource), body, Duration.ZERO);
    }

    /** The endpoint tried first now (tests of leader following). */
    String preferredEndpoint() {
        return authorities.get(Math.floorMod(preferred.get(), authorities.size()));
    }
}
