package io.leasehold.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * Locks granted together, in one log entry, under one token.
 *
 * @param grants      one per lock, in the order asked
 * @param token       the token of every lock
 * @param reacquired  the owner already held all of them under this token (leases restarted)
 * @param sentAtNanos the anchor of every lease ({@link System#nanoTime()})
 */
public record Leases(List<Grant> grants, long token, boolean reacquired, long sentAtNanos) {
    static Leases from(JsonNode json, long sentAtNanos) {
        List<Grant> grants = new ArrayList<>();
        for (JsonNode grant : json.path("grants")) {
            grants.add(Grant.from(grant));
        }
        return new Leases(List.copyOf(grants), json.path("token").asLong(), json.path("reacquired").asBoolean(false),
                sentAtNanos);
    }

    public List<String> names() {
        return grants.stream().map(Grant::name).toList();
    }

    /** As {@link Lease#validUntilNanos}, for the shortest ttl of the set. */
    public long validUntilNanos(Duration margin) {
        long ttlMs = grants.stream().mapToLong(Grant::ttlMs).min().orElse(0);
        return sentAtNanos + Math.max(0, Duration.ofMillis(ttlMs).minus(margin).toNanos());
    }
}
