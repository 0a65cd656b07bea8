package io.leasehold.client;

import java.time.Duration;
import java.util.EnumSet;
import java.util.concurrent.CompletionStage;

/**
 * A held lock whose watchdog thread renews its lease every ttl/3, for
 * try-with-resources:
 *
 * <pre>{@code
 * try (Lock lock = client.lock("payments:42", LockOptions.ttl(Duration.ofSeconds(10)))) {
 *     lock.lost().thenRun(worker::cancel);       // stop the moment it is lost
 *     charge(order, lock.token());               // pass the token with every write
 * }
 * }</pre>
 *
 * <p>{@link #lost()} completes no later than the safe deadline (the start
 * of the call of the last successful grant or renewal + ttl − drift margin)
 * when renewals fail, at once when the cluster says the lease has ended, and
 * with {@link LostReason.Kind#ENDED} when the guard is closed.
 */
public final class Lock implements AutoCloseable {
    private final Client client;
    private final String name;
    private final String owner;
    private final long token;
    private final Duration ttl;
    private final Watchdog watchdog;

    private Lock(Client client, String name, String owner, long token, Duration ttl, Watchdog watchdog) {
        this.client = client;
        this.name = name;
        this.owner = owner;
        this.token = token;
        this.ttl = ttl;
        this.watchdog = watchdog;
    }

    static Lock acquire(Client client, String name, LockOptions options) {
        Duration requested = Duration.ofMillis(options.ttl().toMillis());
        Duration margin = options.effectiveDriftMargin(requested);
        // Refused before anything is sent.
        Watchdog.checkTiming(requested, margin);
        String owner = options.ownerOrDefault();
        AcquireOptions acquire = AcquireOptions.none().withWait(options.maxWait());
        Lease lease = client.acquire(name, owner, requested, acquire);
        // The shorter of what was asked and what was granted: a shorter grant
        // only brings the deadline closer.
        Duration ttl = Duration.ofMillis(Math.min(requested.toMillis(), lease.grant().ttlMs()));
        long token = lease.token();
        long anchor = lease.sentAtNanos();
        if (anchor + ttl.minus(margin).toNanos() - System.nanoTime() < ttl.toNanos() / 3) {
            Lease renewed = client.renew(name, token, requested);
            if (renewed.token() != token) {
                throw new LeaseholdException("the renewal of token " + token + " answered token " + renewed.token());
            }
            anchor = renewed.sentAtNanos();
        }
        Watchdog.Renewal renewal = cutoff -> {
            Lease renewed = client.renew(name, token, requested, cutoff);
            if (renewed.token() != token) {
                throw new ApiException(409, ErrorCode.STALE_TOKEN, "the renewal answered token " + renewed.token(), null);
            }
            return renewed.sentAtNanos();
        };
        Watchdog watchdog = new Watchdog("lock " + name, renewal, EnumSet.of(ErrorCode.STALE_TOKEN, ErrorCode.NOT_HELD),
                ttl, margin, anchor);
        return new Lock(client, name, owner, token, ttl, watchdog);
    }

    /** The fencing token of this grant: send it with every write. */
    public long token() {
        return token;
    }

    public String name() {
        return name;
    }

    public String owner() {
        return owner;
    }

    /** The lease's ttl, as granted. */
    public Duration ttl() {
        return ttl;
    }

    /** The safe deadline, a {@link System#nanoTime()} reading: it only moves forward, and stops once lost. */
    public long validUntilNanos() {
        return watchdog.validUntilNanos();
    }

    /** Time left until the safe deadline; negative once it has passed. */
    public Duration safeRemaining() {
        return Duration.ofNanos(watchdog.validUntilNanos() - System.nanoTime());
    }

    /** True once lost, or once the safe deadline has passed. */
    public boolean isLost() {
        return watchdog.isLost();
    }

    /** True while renewals fail or are overdue, and once lost: finish or stop early. */
    public boolean isAtRisk() {
        return watchdog.isAtRisk();
    }

    /** Completes with the reason when the lock is lost, or with {@code ENDED} when the guard is closed. */
    public CompletionStage<LostReason> lost() {
        return watchdog.lost();
    }

    /**
     * Stops the watchdog, then releases the lock on the cluster. Throws the
     * cluster's error ({@code stale_token} or {@code not_held} when the lock
     * was already lost) or {@link UnavailableException}, in which case the
     * lease runs out after its ttl.
     */
    public void release() {
        watchdog.halt();
        client.release(name, token);
    }

    /**
     * {@link #release()}, except that a lock already lost is not an error
     * here: the block that used it learnt so from {@link #lost()}.
     */
    @Override
    public void close() {
        boolean wasLost = watchdog.isLost();
        try {
            release();
        } catch (ApiException e) {
            if (!wasLost) {
                throw e;
            }
        }
    }
}
