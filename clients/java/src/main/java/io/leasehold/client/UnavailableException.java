package io.leasehold.client;

/**
 * No node gave a usable answer within the retry budget (no leader, no
 * quorum, nodes unreachable, 503 until the end). {@link #code()} and
 * {@link #status()} are those of the last 503 seen, null when there was none.
 */
public class UnavailableException extends LeaseholdException {
    private static final long serialVersionUID = 1L;

    private final ErrorCode code;
    private final Integer status;

    public UnavailableException(String message, ErrorCode code, Integer status) {
        super("cluster unavailable: " + message);
        this.code = code;
        this.status = status;
    }

    public ErrorCode code() {
        return code;
    }

    public Integer status() {
        return status;
    }
}
