package io.leasehold.client;

/** Why a call of the client failed: the subclasses say how. */
public class LeaseholdException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public LeaseholdException(String message) {
        super(message);
    }

    public LeaseholdException(String message, Throwable cause) {
        super(message, cause);
    }
}
