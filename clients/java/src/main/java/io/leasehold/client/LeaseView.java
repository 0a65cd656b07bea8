package io.leasehold.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;

/**
 * A held lock as {@code GET /v1/locks/{name}} shows it.
 *
 * @param name    the lock
 * @param owner   its holder
 * @param token   the holder's fencing token
 * @param ttlMs   the lease's ttl
 * @param session the session it lives by, or null
 * @param waiters owners queued for it, in order
 */
public record LeaseView(String name, String owner, long token, long ttlMs, Long session, List<String> waiters) {
    static LeaseView from(JsonNode json) {
        List<String> waiters = new ArrayList<>();
        for (JsonNode waiter : json.path("waiters")) {
            waiters.add(waiter.path("owner").asText());
        }
        JsonNode session = json.path("session");
        return new LeaseView(json.path("name").asText(), json.path("owner").asText(), json.path("token").asLong(),
                json.path("ttl_ms").asLong(), session.isIntegralNumber() ? session.asLong() : null, List.copyOf(waiters));
    }
}
