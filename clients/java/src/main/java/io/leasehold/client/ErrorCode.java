package io.leasehold.client;

/**
 * The cluster's machine-readable error codes; each has exactly one HTTP
 * status (docs/api.md lists when each is answered).
 */
public enum ErrorCode {
    INVALID_ARGUMENT, UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND, NOT_HELD, NO_RECORD, NO_SNAPSHOT,
    NOT_MEMBER, SESSION_NOT_FOUND, METHOD_NOT_ALLOWED, REQUEST_TIMEOUT, HELD, LOCK_DELAYED, RESERVED,
    STALE_TOKEN, WAIT_TIMEOUT, LOCK_MISMATCH, HELD_UNDER_SESSION, SEQ_TOO_OLD, SEQ_REUSED, REQUEST_ID_REUSED,
    ALREADY_INITIALIZED, WOULD_LOSE_QUORUM, BODY_TOO_LARGE, UNSUPPORTED_MEDIA_TYPE, INTERNAL, UNAVAILABLE,
    NOT_LEADER, OVERLOADED, TLS_REQUIRED, FULL, NO_SEMAPHORE, DEADLOCK, SEMAPHORE_FULL, LIMIT_MISMATCH,
    NO_LEADER, COMPACTED, NO_USER, NO_ROLE, NO_TOKEN, ALREADY_EXISTS,
    /** An answer that was not a leasehold error body (a proxy in between, say). */
    UNKNOWN;

    /** The code as the API spells it, e.g. {@code "stale_token"}. */
    public String wire() {
        return name().toLowerCase(java.util.Locale.ROOT);
    }

    /** The code the API spells {@code wire}; {@link #UNKNOWN} for any other. */
    public static ErrorCode fromWire(String wire) {
        for (ErrorCode code : values()) {
            if (code.wire().equals(wire)) {
                return code;
            }
        }
        return UNKNOWN;
    }
}
