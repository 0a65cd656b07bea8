package io.leasehold.client;

/**
 * Why a {@link Lock} or {@link Session} stopped protecting its holder.
 *
 * @param kind    what happened
 * @param code    the cluster's error code when {@code kind} is {@link Kind#REVOKED}, else null
 * @param message a description
 */
public record LostReason(Kind kind, ErrorCode code, String message) {
    /** What ended the guard's protection. */
    public enum Kind {
        /**
         * The safe deadline passed without a successful renewal (no quorum,
         * nodes unreachable or hung, this process paused). The lease may still
         * be held on the cluster, but nothing guarantees it any more.
         */
        EXPIRED,
        /**
         * The cluster answered a renewal with {@code stale_token} or
         * {@code not_held} (a lock) or {@code session_not_found} (a session):
         * it has ended and another owner may hold the lock.
         */
        REVOKED,
        /** The guard was released or closed before anything was lost. */
        ENDED
    }
}
