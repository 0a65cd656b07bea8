package io.leasehold.client;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * The cluster answered with a JSON error: its status, {@link ErrorCode} and
 * the error's other fields ({@code holder}, {@code current_token},
 * {@code conflicts}, ...).
 */
public class ApiException extends LeaseholdException {
    private static final long serialVersionUID = 1L;

    private final int status;
    private final ErrorCode code;
    private final transient JsonNode details;

    public ApiException(int status, ErrorCode code, String message, JsonNode details) {
        super(status + " " + code.wire() + ": " + message);
        this.status = status;
        this.code = code;
        this.details = details;
    }

    public int status() {
        return status;
    }

    public ErrorCode code() {
        return code;
    }

    /** The error field {@code name}, or null when the answer has none. */
    public JsonNode detail(String name) {
        return details == null ? null : details.get(name);
    }

    /** The message the cluster gave, without status and code. */
    public String apiMessage() {
        JsonNode message = detail("message");
        return message == null ? "" : message.asText();
    }
}
