package io.leasehold.client;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * A fenced record: its value and the lock and token that wrote it.
 *
 * @param key   its key
 * @param value its value, any JSON
 * @param lock  the lock whose token wrote it
 * @param token that token
 * @param index the index of the entry that wrote it
 */
public record FencedRecord(String key, JsonNode value, String lock, long token, long index) {
    static FencedRecord from(JsonNode json) {
        return new FencedRecord(json.path("key").asText(), json.get("value"), json.path("lock").asText(),
                json.path("token").asLong(), json.path("index").asLong());
    }
}
