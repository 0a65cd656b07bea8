//! Schemas of the fields whose bounds the server enforces (feature
//! `openapi`): built from [`Limits::DEFAULT`] and the list bounds, the same
//! values the server checks, so the document cannot drift from them.
//!
//! Used with `#[schema(schema_with = ..)]` on the body types. JSON Schema
//! counts a string's length in characters, the server counts UTF-8 bytes:
//! `maxLength` is the byte bound (exact for ASCII, and a character never
//! takes less than a byte), and `x-max-bytes` states the bound itself.

use utoipa::openapi::extensions::ExtensionsBuilder;
use utoipa::openapi::schema::{
    AdditionalProperties, Array, ArrayBuilder, ObjectBuilder, Schema, SchemaFormat, SchemaType, Type,
};
use utoipa::openapi::RefOr;
use utoipa::openapi::{KnownFormat, Object};

use crate::Limits;
use crate::MAX_LIST_LIMIT;

/// No control characters (Unicode category Cc, what `char::is_control` tests).
pub const PRINTABLE: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$";

/// A non-empty printable text of at most `max_bytes` UTF-8 bytes; `null`
/// allowed too when `nullable` (an optional field).
pub fn text(max_bytes: usize, nullable: bool, description: &str) -> Object {
    let schema_type: SchemaType =
        if nullable { [Type::String, Type::Null].into_iter().collect() } else { Type::String.into() };
    ObjectBuilder::new()
        .schema_type(schema_type)
        .min_length(Some(1))
        .max_length(Some(max_bytes))
        .pattern(Some(PRINTABLE))
        .description(Some(format!(
            "{description} Non-empty, at most {max_bytes} bytes of UTF-8, no control characters."
        )))
        .extensions(Some(ExtensionsBuilder::new().add("x-max-bytes", max_bytes).build()))
        .build()
}

/// An unsigned 64-bit integer in `min..=max`; `null` allowed too when
/// `nullable`. Format `int64` where `max` fits one; none beyond (the full
/// range of a token: `int64` would tell tools to stop at 2^63 - 1, and the
/// fuzzer generated non-integral numbers for a custom `uint64` format).
pub fn uint(min: u64, max: u64, nullable: bool, description: &str) -> Object {
    let schema_type: SchemaType =
        if nullable { [Type::Integer, Type::Null].into_iter().collect() } else { Type::Integer.into() };
    let mut builder = ObjectBuilder::new().schema_type(schema_type);
    if max <= i64::MAX as u64 {
        builder = builder.format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)));
    }
    let mut builder = builder.minimum(Some(min as usize)).maximum(Some(max as usize));
    if !description.is_empty() {
        builder = builder.description(Some(description));
    }
    builder.build()
}

// One function per constrained field, for `schema_with` (which takes a path).

/// A user's or role's name: 1 to `max_owner_bytes` of ASCII letters,
/// digits, `-`, `_`, `.`, `@` (nothing a URL path or a shell would quote).
pub fn principal_name() -> Object {
    let max = Limits::DEFAULT.max_owner_bytes;
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(max))
        .pattern(Some("^[A-Za-z0-9._@-]+$"))
        .description(Some(format!("A user's or role's name: 1 to {max} ASCII letters, digits, '-', '_', '.' and '@'.")))
        .build()
}

/// The text of an actor: who caused an event (`by`), and the `by` filter
/// of the event streams.
pub const ACTOR_PATTERN: &str = "^(user:[A-Za-z0-9._@-]+|client|admin|cluster|unknown)$";

/// An event's `by`: who caused it.
pub fn actor() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(ACTOR_PATTERN))
        .description(Some(
            "Who caused the event: `user:NAME` (a user's request), `client` (the client token), `admin` (the admin \
             token, or a node without secrets), `cluster` (a Tick: expiries, ends of lock delays and waits, what \
             they hand over, sessions that expire), or `unknown` (an entry written before entries recorded it). A \
             hand-over to a waiter is by whoever freed the lock; its `owner` names the waiter.",
        ))
        .build()
}

/// The `by` filter of the event streams: an actor's text.
pub fn actor_filter() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(ACTOR_PATTERN))
        .description(Some("Only events caused by this actor (each event's `by`): `user:NAME`, `client`, `admin`, `cluster` or `unknown`."))
        .build()
}

/// A grant's prefix: empty (every name) or the start of a lock name.
pub fn prefix() -> Object {
    let max = Limits::DEFAULT.max_name_bytes;
    ObjectBuilder::new()
        .schema_type(Type::String)
        .max_length(Some(max))
        .pattern(Some(PRINTABLE))
        .description(Some(format!(
            "The names a grant covers start with this: \"\" for every name, else at most {max} bytes of UTF-8, no control characters."
        )))
        .extensions(Some(ExtensionsBuilder::new().add("x-max-bytes", max).build()))
        .build()
}

pub fn lock_name() -> Object {
    text(Limits::DEFAULT.max_name_bytes, false, "A lock name.")
}

pub fn lock_names() -> Array {
    let max = Limits::DEFAULT.max_names;
    ArrayBuilder::new()
        .items(lock_name())
        .min_items(Some(1))
        .max_items(Some(max))
        .unique_items(true)
        .description(Some(format!("1 to {max} distinct lock names.")))
        .build()
}

/// The shared holder a renew or release names (`mode: "shared"` only).
pub fn shared_owner() -> Object {
    text(Limits::DEFAULT.max_owner_bytes, true, "The shared holder; with `mode: \"shared\"` only.")
}

pub fn owner() -> Object {
    text(
        Limits::DEFAULT.max_owner_bytes,
        false,
        "Who takes the lock; an acquire by the holder returns its own grant again.",
    )
}

pub fn request_id() -> Object {
    text(
        Limits::DEFAULT.max_request_id_bytes,
        true,
        "Retries with the same id get the first answer (the same token), for a few minutes.",
    )
}

pub fn acquire_ttl_ms() -> Object {
    let l = Limits::DEFAULT;
    uint(l.min_ttl_ms, l.max_ttl_ms, true, "The lease's time to live, in ms; exactly one of `ttl_ms` and `session`.")
}

pub fn acquire_session() -> Object {
    uint(
        0,
        crate::MAX_TOKEN,
        true,
        "Hold the lock (or the permits) as long as this session lives (its keepalives keep it; renew refuses it) \
         instead of a ttl; \
         `owner` must be the session's owner. Exactly one of `ttl_ms` and `session`.",
    )
}

pub fn seq() -> Object {
    uint(
        0,
        crate::MAX_TOKEN,
        true,
        "With `session`: this request's sequence number in the session. A retry with a seq the session remembers \
         (its last 64) gets the first answer without being applied again; an older one is refused, 409 `seq_too_old`, \
         and one that answered another request, 409 `seq_reused`.",
    )
}

pub fn release_session() -> Object {
    uint(0, crate::MAX_TOKEN, true, "The session the lock is held under; needed with `seq`.")
}

/// A session id, in a path or body.
pub fn session_id() -> Object {
    uint(0, crate::MAX_TOKEN, false, "A session id: the log index of the entry that created the session.")
}

pub fn session_after() -> Object {
    uint(0, crate::MAX_TOKEN, false, "Only sessions with ids above this (the last id of the previous page).")
}

pub fn session_owner() -> Object {
    text(Limits::DEFAULT.max_owner_bytes, false, "Who holds locks under the session.")
}

pub fn session_ttl_ms() -> Object {
    let l = Limits::DEFAULT;
    uint(l.min_ttl_ms, l.max_ttl_ms, false, "The session's time to live, in ms, restarted by each keepalive.")
}

pub fn keepalive_ttl_ms() -> Object {
    let l = Limits::DEFAULT;
    uint(l.min_ttl_ms, l.max_ttl_ms, true, "The new ttl, in ms; the session's when absent.")
}

pub fn renew_ttl_ms() -> Object {
    let l = Limits::DEFAULT;
    uint(l.min_ttl_ms, l.max_ttl_ms, true, "The new ttl, in ms; the grant's when absent.")
}

pub fn wait_ms() -> Object {
    uint(
        0,
        Limits::DEFAULT.max_wait_ms,
        true,
        "Wait up to this long (ms) in the lock's FIFO queue when another owner holds it; 0 or absent: fail at once.",
    )
}

pub fn lock_delay_ms() -> Object {
    uint(
        0,
        Limits::DEFAULT.max_lock_delay_ms,
        true,
        "Should this lease expire (not be released), nobody is granted the lock for this long (ms) after the expiry; \
         0 or absent: no delay.",
    )
}

pub fn semaphore_limit() -> Object {
    uint(
        1,
        u64::from(Limits::DEFAULT.max_semaphore_limit),
        false,
        "How many permits may be in use at once. The acquire that creates the semaphore sets it; another limit \
         while it lives is 409 `limit_mismatch`.",
    )
}

pub fn permits() -> Object {
    uint(
        1,
        u64::from(Limits::DEFAULT.max_semaphore_limit),
        true,
        "Permits to take at once, all or none (default 1, at most the limit).",
    )
}

pub fn semaphore_wait_ms() -> Object {
    uint(
        0,
        Limits::DEFAULT.max_wait_ms,
        true,
        "Wait up to this long (ms) in the semaphore's FIFO queue when too few permits are free; 0 or absent: fail \
         at once.",
    )
}

/// `#[schema(value_type = crate::schema::TokenNumber)]` on a [`FencingToken`](crate::FencingToken)
/// field without bounds: utoipa cannot derive a schema for a type of the pure core, and through
/// this alias the document refers to the `u64` schema, as it did when the token was an alias of `u64`.
pub type TokenNumber = u64;

/// A fencing token, or any other u64 on the wire.
pub fn token() -> Object {
    uint(0, crate::MAX_TOKEN, false, "A fencing token: the log index of the entry that granted the lock (below 2^53).")
}

pub fn list_limit() -> Object {
    uint(1, MAX_LIST_LIMIT as u64, false, "At most this many locks (default 100).")
}

/// `replication` of `/v1/cluster/status`: member id (a JSON key, so a
/// string of digits) → the highest log index known replicated to it, or `null`.
pub fn replication() -> Object {
    let index = ObjectBuilder::new()
        .schema_type([Type::Integer, Type::Null].into_iter().collect::<SchemaType>())
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(0usize));
    ObjectBuilder::new()
        .schema_type([Type::Object, Type::Null].into_iter().collect::<SchemaType>())
        .property_names(Some(ObjectBuilder::new().schema_type(Type::String).pattern(Some("^[0-9]+$"))))
        .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(Schema::Object(index.build())))))
        .description(Some(
            "Leader only: the highest log index known replicated to each member, by member id (`null` while unknown).",
        ))
        .build()
}

pub fn list_prefix() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .max_length(Some(Limits::DEFAULT.max_name_bytes))
        .description(Some("Only locks whose names start with this (at most as many bytes as a name)."))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures the pattern refuses exactly what `char::is_control` refuses, at the range edges.
    #[test]
    fn printable_pattern_names_the_control_ranges() {
        for c in ['\u{0}', '\u{1f}', '\u{7f}', '\u{9f}'] {
            assert!(c.is_control(), "{c:?}");
        }
        for c in [' ', '~', '\u{a0}'] {
            assert!(!c.is_control(), "{c:?}");
        }
        assert_eq!(PRINTABLE, "^[^\\u0000-\\u001F\\u007F-\\u009F]*$");
    }
}
