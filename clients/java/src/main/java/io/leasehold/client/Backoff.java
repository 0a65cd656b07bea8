package io.leasehold.client;

import java.time.Duration;
import java.util.concurrent.ThreadLocalRandom;

/**
 * How long one call pauses between tries: short and growing while a node is
 * unreachable or an election runs, at least as long as the node asks when it
 * is overloaded; always jittered, so that clients refused together do not
 * come back together (as the Rust client's backoff.rs).
 */
final class Backoff {
    static final Duration MAX_UNAVAILABLE_PAUSE = Duration.ofMillis(500);
    /** Assumed when an overloaded answer names no Retry-After. */
    static final Duration DEFAULT_OVERLOADED_PAUSE = Duration.ofSeconds(1);

    private Duration next = Duration.ofMillis(25);

    /**
     * After an unreachable node or an election in progress: doubling from
     * 25 ms up to 500 ms, each pause drawn from its upper half. The server's
     * Retry-After (a whole second) is not waited for: an election usually
     * ends sooner.
     */
    Duration unavailable() {
        Duration pause = next;
        next = min(next.multipliedBy(2), MAX_UNAVAILABLE_PAUSE);
        return jitter(pause.dividedBy(2), pause);
    }

    /**
     * After {@code overloaded}: the server's Retry-After (null when it named
     * none), stretched by up to half again.
     */
    Duration overloaded(Duration retryAfter) {
        Duration pause = retryAfter == null ? DEFAULT_OVERLOADED_PAUSE : retryAfter;
        if (pause.compareTo(next) < 0) {
            pause = next;
        }
        return jitter(pause, pause.plus(pause.dividedBy(2)));
    }

    private static Duration min(Duration a, Duration b) {
        return a.compareTo(b) <= 0 ? a : b;
    }

    /** A duration drawn uniformly from [low, high]. */
    static Duration jitter(Duration low, Duration high) {
        long span = high.toNanos() - low.toNanos();
        return span <= 0 ? low : low.plusNanos(ThreadLocalRandom.current().nextLong(span + 1));
    }
}
