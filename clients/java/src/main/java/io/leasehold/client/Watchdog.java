package io.leasehold.client;

import java.time.Duration;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.TimeUnit;

/**
 * The watchdog shared by {@link Lock} (which renews one lease) and
 * {@link Session} (which keeps one session, and so all its locks, alive):
 * what it renews differs, the timing and the lost signal do not (as
 * watchdog.rs of the Rust client).
 *
 * <p>The cluster never expires a lease or a session before ttl of real time
 * has passed since the entry that granted or renewed it was committed, and
 * that commit comes after the client sent the request. So on this process's
 * monotonic clock ({@link System#nanoTime()}) it is certainly alive until
 * {@code anchor + ttl − drift margin}, where the anchor is the start of the
 * call that produced the last grant or renewal (no later than the send of
 * its first attempt, whichever attempt the cluster applied) and the margin
 * covers the rate difference between this machine's clock and the
 * leader's, and this thread's scheduling delays. That is the safe deadline.
 * The cluster's {@code expires_in_ms} plays no part: it counts from the
 * commit, which the client cannot observe.
 *
 * <p>The watchdog renews every ttl/3 after the anchor. A failed renewal is
 * retried with a short back-off until the safe deadline, and every attempt
 * is cut off at that deadline (the client's retry budget does not delay it),
 * so {@code lost} completes no later than the safe deadline even when every
 * node hangs. A renewal the cluster refuses because the lease or session
 * has ended completes it at once.
 */
final class Watchdog {
    private static final Duration INITIAL_BACKOFF = Duration.ofMillis(50);
    private static final Duration MAX_BACKOFF = Duration.ofMillis(500);

    /** One renewal: returns its anchor, a {@link System#nanoTime()}; every try is cut off at {@code cutoffNanos}. */
    interface Renewal {
        long renew(long cutoffNanos) throws InterruptedException;
    }

    private final Renewal renewal;
    /** The error codes by which the cluster says what is renewed has ended. */
    private final Set<ErrorCode> endedBy;
    private final long ttlNanos;
    private final long marginNanos;
    private final CompletableFuture<LostReason> lost = new CompletableFuture<>();
    private final Thread thread;

    // Guarded by this.
    private long anchor;
    /** Set by a failed renewal attempt, cleared by a successful one. */
    private boolean failing;

    /** Refuses a margin over half the ttl: the watchdog would have no time left to renew in. */
    static void checkTiming(Duration ttl, Duration margin) {
        if (ttl.toMillis() < 1) {
            throw new IllegalArgumentException("the ttl must be at least 1 ms");
        }
        if (margin.isNegative() || margin.compareTo(ttl.dividedBy(2)) > 0) {
            throw new IllegalArgumentException("drift margin " + margin + " is not between 0 and half the ttl " + ttl);
        }
    }

    Watchdog(String subject, Renewal renewal, Set<ErrorCode> endedBy, Duration ttl, Duration margin, long anchor) {
        checkTiming(ttl, margin);
        this.renewal = renewal;
        this.endedBy = endedBy;
        this.ttlNanos = ttl.toNanos();
        this.marginNanos = margin.toNanos();
        this.anchor = anchor;
        this.thread = new Thread(this::run, "leasehold watchdog of " + subject);
        thread.setDaemon(true);
        thread.start();
    }

    private long deadline(long anchor) {
        return anchor + ttlNanos - marginNanos;
    }

    private long interval() {
        return ttlNanos / 3;
    }

    /** The current safe deadline ({@link System#nanoTime()}); it only moves forward, and stops once lost. */
    synchronized long validUntilNanos() {
        return deadline(anchor);
    }

    /** True once lost, or once the safe deadline has passed (the watchdog completes {@code lost} then). */
    boolean isLost() {
        return lost.isDone() || System.nanoTime() - validUntilNanos() >= 0;
    }

    /**
     * True while the lease is still safe but renewals are in trouble
     * (Chubby's jeopardy): from the first failed attempt until one succeeds,
     * or once the renewal due at anchor + ttl/3 is half an interval late (an
     * attempt hanging on a node that does not answer). False once lost. The
     * same rule as every leasehold client's (clients/conformance/PROTOCOL.md).
     */
    synchronized boolean isAtRisk() {
        long now = System.nanoTime();
        boolean overdue = now - (anchor + interval() + interval() / 2) >= 0;
        return !isLost() && (failing || overdue);
    }

    CompletionStage<LostReason> lost() {
        return lost.minimalCompletionStage();
    }

    /**
     * Stops the watchdog and waits until it has stopped, so that no renewal
     * is sent after whatever the caller does next; {@code lost} completes
     * with {@link LostReason.Kind#ENDED} unless it was lost before.
     */
    void halt() {
        thread.interrupt();
        boolean interrupted = false;
        while (thread.isAlive()) {
            try {
                thread.join();
            } catch (InterruptedException e) {
                interrupted = true;
            }
        }
        lost.complete(new LostReason(LostReason.Kind.ENDED, null, "the guard was closed"));
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    private void run() {
        try {
            while (true) {
                long from;
                synchronized (this) {
                    from = anchor;
                }
                sleepUntil(from + interval());
                long renewed = renewBefore(deadline(from));
                synchronized (this) {
                    anchor = Math.max(anchor, renewed);
                    failing = false;
                }
            }
        } catch (InterruptedException stopped) {
            // halt(): the guard was closed.
        } catch (Lost reason) {
            lost.complete(reason.reason);
        }
    }

    /** Why the loop ends with a loss. */
    private static final class Lost extends Exception {
        private static final long serialVersionUID = 1L;
        private final transient LostReason reason;

        Lost(LostReason reason) {
            super(reason.message(), null, false, false);
            this.reason = reason;
        }
    }

    /** Renews, retrying failures, until {@code deadline}; returns the new anchor. */
    private long renewBefore(long deadline) throws InterruptedException, Lost {
        Duration backoff = INITIAL_BACKOFF;
        String lastError = "no renewal attempt finished";
        while (true) {
            if (System.nanoTime() - deadline >= 0) {
                throw new Lost(new LostReason(LostReason.Kind.EXPIRED, null,
                        "no renewal succeeded before the safe deadline (last error: " + lastError + ")"));
            }
            try {
                long renewed = renewal.renew(deadline);
                // An answer that came at or after the deadline does not
                // count: the lease may have ended meanwhile.
                if (System.nanoTime() - deadline < 0) {
                    return renewed;
                }
                lastError = "the renewal was answered after the safe deadline";
            } catch (ApiException e) {
                if (endedBy.contains(e.code())) {
                    throw new Lost(new LostReason(LostReason.Kind.REVOKED, e.code(), e.getMessage()));
                }
                lastError = e.getMessage();
            } catch (LeaseholdException e) {
                lastError = e.getMessage();
            }
            synchronized (this) {
                failing = true;
            }
            long wake = Math.min(System.nanoTime() + backoff.toNanos(), deadline);
            sleepUntil(wake);
            backoff = backoff.multipliedBy(2).compareTo(MAX_BACKOFF) > 0 ? MAX_BACKOFF : backoff.multipliedBy(2);
        }
    }

    private static void sleepUntil(long nanoTime) throws InterruptedException {
        long nanos = nanoTime - System.nanoTime();
        if (nanos > 0) {
            TimeUnit.NANOSECONDS.sleep(nanos);
        }
    }
}
