package io.leasehold.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A session as the cluster shows it.
 *
 * @param session   its id: the index of the entry that created it
 * @param owner     the owner its locks are held as
 * @param ttlMs     its ttl
 * @param lockCount locks held under it
 * @param locks     (a get of one session only) each lock's token, by name
 */
public record SessionView(long session, String owner, long ttlMs, long lockCount, Map<String, Long> locks) {
    static SessionView from(JsonNode json) {
        Map<String, Long> locks = new LinkedHashMap<>();
        for (JsonNode lock : json.path("locks")) {
            locks.put(lock.path("name").asText(), lock.path("token").asLong());
        }
        return new SessionView(json.path("session").asLong(), json.path("owner").asText(), json.path("ttl_ms").asLong(),
                json.path("lock_count").asLong(), Map.copyOf(locks));
    }
}
