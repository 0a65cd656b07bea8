package io.leasehold.client;

import java.time.Duration;

/**
 * A grant with the instant its call started on this process's monotonic
 * clock ({@link System#nanoTime()}): the anchor of the lease, no later than
 * the send of the call's first attempt.
 *
 * @param grant        the cluster's answer
 * @param sentAtNanos  the anchor, a {@link System#nanoTime()} reading
 */
public record Lease(Grant grant, long sentAtNanos) {
    public long token() {
        return grant.token();
    }

    /**
     * The {@link System#nanoTime()} until which the holder may act on this
     * lease: anchor + ttl − {@code margin}. The cluster cannot expire it
     * earlier; the margin covers drift between this machine's clock and the
     * leader's. Not for a lock under a session, which lasts as long as the
     * session ({@link Session#safeRemaining()}).
     */
    public long validUntilNanos(Duration margin) {
        return sentAtNanos + Math.max(0, Duration.ofMillis(grant.ttlMs()).minus(margin).toNanos());
    }
}
