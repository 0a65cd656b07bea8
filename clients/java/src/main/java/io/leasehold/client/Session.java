package io.leasehold.client;

import java.time.Duration;
import java.util.EnumSet;
import java.util.List;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.atomic.AtomicLong;

/**
 * One liveness deadline for any number of locks: a watchdog thread sends one
 * keepalive every ttl/3 whatever the session holds, and its one
 * {@link #lost()} speaks for all of them. Locks taken with {@link #lock} and
 * {@link #lockMany} live as long as the session; {@link #close()} deletes it,
 * releasing them.
 *
 * <p>Every acquire and keepalive carries the next number of the session's
 * sequence ({@code seq}), the same on each retry of one call: the cluster
 * answers a retry it has applied from the session's memory.
 */
public final class Session implements AutoCloseable {
    private final Client client;
    private final long id;
    private final String owner;
    /** The last {@code seq} sent, shared with the watchdog's keepalives. */
    private final AtomicLong seq = new AtomicLong();
    private final Watchdog watchdog;

    private Session(Client client, long id, String owner, Duration ttl, Duration margin, long anchor) {
        this.client = client;
        this.id = id;
        this.owner = owner;
        Watchdog.Renewal keepAlive = cutoff -> client.keepAlive(id, seq.incrementAndGet(), cutoff);
        this.watchdog = new Watchdog("session " + id, keepAlive, EnumSet.of(ErrorCode.SESSION_NOT_FOUND), ttl, margin,
                anchor);
    }

    static Session open(Client client, LockOptions options) {
        Duration ttl = Duration.ofMillis(options.ttl().toMillis());
        Duration margin = options.effectiveDriftMargin(ttl);
        Watchdog.checkTiming(ttl, margin);
        String owner = options.ownerOrDefault();
        Client.Answer created = client.createSession(owner, ttl.toMillis());
        return new Session(client, created.body().path("session").asLong(), owner, ttl, margin,
                created.startedNanos());
    }

    public long id() {
        return id;
    }

    public String owner() {
        return owner;
    }

    /** Time left until the safe deadline of the session and every lock under it; negative once passed. */
    public Duration safeRemaining() {
        return Duration.ofNanos(watchdog.validUntilNanos() - System.nanoTime());
    }

    public boolean isLost() {
        return watchdog.isLost();
    }

    public boolean isAtRisk() {
        return watchdog.isAtRisk();
    }

    /** Completes when the session, and with it every lock under it, is lost, or when it is closed. */
    public CompletionStage<LostReason> lost() {
        return watchdog.lost();
    }

    /**
     * Acquires {@code name} under the session, waiting in its queue up to
     * {@code wait} (null: not at all). Release it with
     * {@link Client#release} and its token, or let {@link #close()} do it.
     */
    public Grant lock(String name, Duration wait) {
        return client.acquireFor(name, owner, 0, id, seq.incrementAndGet(), AcquireOptions.none().withWait(wait))
                .grant();
    }

    /** Acquires every lock of {@code names} under the session, in one entry, under one token, or none. */
    public Leases lockMany(List<String> names, Duration wait) {
        return client.acquireManyFor(names, owner, 0, id, seq.incrementAndGet(), AcquireOptions.none().withWait(wait));
    }

    /**
     * Stops the watchdog and deletes the session, releasing every lock under
     * it (each handed to its first waiter). A session already lost is not an
     * error here; otherwise the cluster's error or
     * {@link UnavailableException} (the session then runs out after its ttl).
     */
    @Override
    public void close() {
        boolean wasLost = watchdog.isLost();
        watchdog.halt();
        try {
            client.deleteSession(id);
        } catch (ApiException e) {
            if (!wasLost) {
                throw e;
            }
        }
    }
}
