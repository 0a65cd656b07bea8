package io.leasehold.client;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * The cluster's answer to an acquire or a renew.
 *
 * @param name         the lock
 * @param owner        who holds it
 * @param token        the fencing token: send it with every write
 * @param ttlMs        the lease's ttl
 * @param expiresInMs  the cluster's view of the time left, counted from the commit (not an anchor)
 * @param reacquired   acquire only: the owner already held the lock (same token, lease restarted)
 * @param session      the session the lock lives by, or null
 */
public record Grant(String name, String owner, long token, long ttlMs, long expiresInMs, boolean reacquired,
        Long session) {
    static Grant from(JsonNode json) {
        JsonNode session = json.path("session");
        return new Grant(json.path("name").asText(), json.path("owner").asText(), json.path("token").asLong(),
                json.path("ttl_ms").asLong(), json.path("expires_in_ms").asLong(),
                json.path("reacquired").asBoolean(false), session.isIntegralNumber() ? session.asLong() : null);
    }
}
