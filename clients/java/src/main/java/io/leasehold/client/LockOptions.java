package io.leasehold.client;

import java.time.Duration;

/**
 * How to acquire and keep a {@link Lock} or a {@link Session}.
 *
 * @param owner       the holder's identity, unique per holder (two holders with one owner share the lock); null
 *                    means {@link Client#defaultOwner()}
 * @param ttl         the lease's time to live, whole milliseconds (the cluster accepts 3 s to 1 h); the watchdog
 *                    renews every ttl/3
 * @param maxWait     how long to wait in the lock's queue; null or zero fails at once with {@code held}
 * @param driftMargin subtracted from every lease to cover clock-rate drift between this machine and the leader,
 *                    and the watchdog's scheduling delays; null means ttl/10, at most ttl/2
 */
public record LockOptions(String owner, Duration ttl, Duration maxWait, Duration driftMargin) {
    public LockOptions {
        java.util.Objects.requireNonNull(ttl, "a lock or session needs a ttl");
    }

    /** Options with {@code ttl}, a fresh owner, no wait and the default margin. */
    public static LockOptions ttl(Duration ttl) {
        return new LockOptions(null, ttl, null, null);
    }

    public LockOptions withOwner(String owner) {
        return new LockOptions(owner, ttl, maxWait, driftMargin);
    }

    public LockOptions withWait(Duration maxWait) {
        return new LockOptions(owner, ttl, maxWait, driftMargin);
    }

    public LockOptions withDriftMargin(Duration driftMargin) {
        return new LockOptions(owner, ttl, maxWait, driftMargin);
    }

    /** The margin in effect: {@code driftMargin}, or ttl/10. */
    Duration effectiveDriftMargin(Duration wholeTtl) {
        return driftMargin == null ? wholeTtl.dividedBy(10) : driftMargin;
    }

    String ownerOrDefault() {
        return owner == null ? Client.defaultOwner() : owner;
    }
}
