package io.leasehold.client;

import java.time.Duration;

/**
 * The optional parts of an acquire.
 *
 * @param maxWait   how long to wait in the lock's FIFO queue when another owner holds it; null or zero fails at
 *                  once with {@code held}
 * @param requestId de-duplicates retries; a fresh one is made when null
 * @param lockDelay should the lease expire (not be released), nobody is granted the lock for this long after
 */
public record AcquireOptions(Duration maxWait, String requestId, Duration lockDelay) {
    /** No wait, a fresh request id, no lock delay. */
    public static AcquireOptions none() {
        return new AcquireOptions(null, null, null);
    }

    public AcquireOptions withWait(Duration maxWait) {
        return new AcquireOptions(maxWait, requestId, lockDelay);
    }

    public AcquireOptions withRequestId(String requestId) {
        return new AcquireOptions(maxWait, requestId, lockDelay);
    }

    public AcquireOptions withLockDelay(Duration lockDelay) {
        return new AcquireOptions(maxWait, requestId, lockDelay);
    }

    Duration waitOrZero() {
        return maxWait == null ? Duration.ZERO : maxWait;
    }
}
