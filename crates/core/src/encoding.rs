//! The compact binary form of a [`Batch`]: what the Raft log's frames and
//! the peer transport carry.
//!
//! Every entry is encoded on the leader and decoded on every follower, so
//! this is on the write path of every replica. serde's form of [`Command`]
//! (an internally tagged enum with optional fields left out) decodes from a
//! binary format only by buffering each command as a tree of owned values
//! first; this form is read straight through: a version byte, the entry's
//! quotas (an option of `max_leases`, `max_waiters`), the command count,
//! then per command a tag byte and its fields in declaration order
//! (integers as LEB128 varints, strings as a varint length and UTF-8 bytes,
//! options as a 0/1 byte before the value, lists as a varint count).
//! Version 3 puts before each command who proposed it (its actor): one
//! byte, 0 for nobody recorded, 1 the client token, 2 the admin token, 3 a
//! user, followed by the user's name. A batch whose commands have no actor
//! (a Tick's) is still written as version 2, byte for byte what earlier
//! versions write and read. Version 1, still read, had no quotas. JSON
//! keeps serde's form.
//!
//! Decoding never panics and never allocates more than the input could
//! hold: a malformed or truncated batch is a [`DecodeError`].

use super::{Batch, Command, FencingToken, Permission, Principal, Quotas, TokenHash};

/// The first byte of every encoded batch. A new layout takes a new version;
/// a decoder refuses versions it does not know.
const VERSION: u8 = 3;
/// The layout before commands carried their actors: what batches without
/// any are still written in, and what the logs of earlier versions hold
/// (read as commands by nobody recorded).
const VERSION_WITHOUT_ACTORS: u8 = 2;
/// The layout before entries carried quotas: what the logs written by
/// earlier versions hold, read as entries without limits.
const VERSION_WITHOUT_QUOTAS: u8 = 1;

// An actor's byte: never reuse one.
const NO_ACTOR: u8 = 0;
const CLIENT_ACTOR: u8 = 1;
const ADMIN_ACTOR: u8 = 2;
const USER_ACTOR: u8 = 3;

/// What an encoded batch holds: its commands, who proposed each (`None`
/// when not recorded), and the quotas they are applied under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decoded {
    pub commands: Vec<Command>,
    pub actors: Vec<Option<Principal>>,
    pub quotas: Option<Quotas>,
}

/// Why bytes are not an encoded batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("encoded batch of version {0}, this build reads version {VERSION}")]
    Version(u8),
    #[error("encoded batch cut short")]
    Truncated,
    #[error("encoded batch: {0}")]
    Malformed(&'static str),
}

/// Appends the encoded form of `commands`, proposed by `actors` (one each),
/// applied under `quotas`, to `out`.
pub(crate) fn encode(commands: &[Command], actors: &[Option<Principal>], quotas: Option<Quotas>, out: &mut Vec<u8>) {
    let with_actors = actors.iter().any(Option::is_some);
    out.push(if with_actors { VERSION } else { VERSION_WITHOUT_ACTORS });
    match quotas {
        Some(Quotas { max_leases, max_waiters }) => {
            out.push(1);
            put_u64(out, max_leases);
            put_u64(out, max_waiters);
        }
        None => out.push(0),
    }
    put_u64(out, commands.len() as u64);
    for (i, command) in commands.iter().enumerate() {
        if with_actors {
            put_actor(out, actors.get(i).and_then(Option::as_ref));
        }
        encode_command(command, out);
    }
}

/// What an encoded batch holds.
pub(crate) fn decode(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    let mut r = Reader { bytes };
    let version = r.u8()?;
    let quotas = match version {
        VERSION | VERSION_WITHOUT_ACTORS => r.opt_quotas()?,
        VERSION_WITHOUT_QUOTAS => None,
        other => return Err(DecodeError::Version(other)),
    };
    let count = r.len(Batch::MAX_COMMANDS)?;
    let mut commands = Vec::with_capacity(count);
    let mut actors = Vec::with_capacity(count);
    for _ in 0..count {
        actors.push(if version == VERSION { r.actor()? } else { None });
        commands.push(decode_command(&mut r)?);
    }
    if !r.bytes.is_empty() {
        return Err(DecodeError::Malformed("bytes after the last command"));
    }
    Ok(Decoded { commands, actors, quotas })
}

fn put_actor(out: &mut Vec<u8>, actor: Option<&Principal>) {
    match actor {
        None => out.push(NO_ACTOR),
        Some(Principal::Client) => out.push(CLIENT_ACTOR),
        Some(Principal::Admin) => out.push(ADMIN_ACTOR),
        Some(Principal::User(name)) => {
            out.push(USER_ACTOR);
            put_str(out, name);
        }
    }
}

// Tags: never reuse one; a new command takes a new number.
const ACQUIRE: u8 = 1;
const RENEW: u8 = 2;
const RELEASE: u8 = 3;
const ACQUIRE_MANY: u8 = 4;
const RELEASE_MANY: u8 = 5;
const CANCEL: u8 = 6;
const PUT_RECORD: u8 = 7;
const GATE: u8 = 8;
const CREATE_SESSION: u8 = 9;
const KEEP_ALIVE: u8 = 10;
const DELETE_SESSION: u8 = 11;
const TICK: u8 = 12;
const CAMPAIGN: u8 = 20;
const PROCLAIM: u8 = 21;
const RESIGN: u8 = 22;
// Shared locks and semaphores start at 32, clear of the tags other new
// commands take from 13.
const RENEW_SHARED: u8 = 33;
const RELEASE_SHARED: u8 = 34;
const RENEW_PERMITS: u8 = 36;
const RELEASE_PERMITS: u8 = 37;
const CANCEL_PERMITS: u8 = 38;
const SET_SEMAPHORE_LIMIT: u8 = 39;
// A shared acquire and a permits acquire with a ttl or a session (and its
// seq). Their layouts before they took a session, a plain ttl, are still
// read under their old tags: the logs of earlier versions hold them.
const ACQUIRE_SHARED: u8 = 40;
const ACQUIRE_PERMITS: u8 = 41;
const ACQUIRE_SHARED_WITH_TTL: u8 = 32;
const ACQUIRE_PERMITS_WITH_TTL: u8 = 35;
// Users and roles start at 48.
const ADD_USER: u8 = 48;
const REMOVE_USER: u8 = 49;
const ADD_TOKEN: u8 = 50;
const REVOKE_TOKEN: u8 = 51;
const ADD_ROLE: u8 = 52;
const REMOVE_ROLE: u8 = 53;
const GRANT_PERMISSION: u8 = 54;
const REVOKE_PERMISSION: u8 = 55;
const ASSIGN_ROLE: u8 = 56;
const UNASSIGN_ROLE: u8 = 57;
/// A session opened by a user: `CreateSession`'s fields, then the user.
const CREATE_SESSION_BY: u8 = 58;

fn encode_command(command: &Command, out: &mut Vec<u8>) {
    match command {
        Command::Acquire { name, owner, ttl_ms, session, wait_ms, request_id, lock_delay_ms, seq } => {
            out.push(ACQUIRE);
            put_str(out, name);
            put_str(out, owner);
            put_opt_u64(out, *ttl_ms);
            put_opt_u64(out, *session);
            put_opt_u64(out, *wait_ms);
            put_opt_str(out, request_id);
            put_opt_u64(out, *lock_delay_ms);
            put_opt_u64(out, *seq);
        }
        Command::Renew { name, token, ttl_ms, request_id } => {
            out.push(RENEW);
            put_str(out, name);
            put_u64(out, token.get());
            put_opt_u64(out, *ttl_ms);
            put_opt_str(out, request_id);
        }
        Command::Release { name, token, request_id, session, seq } => {
            out.push(RELEASE);
            put_str(out, name);
            put_u64(out, token.get());
            put_opt_str(out, request_id);
            put_opt_u64(out, *session);
            put_opt_u64(out, *seq);
        }
        Command::AcquireMany { names, owner, ttl_ms, session, wait_ms, request_id, lock_delay_ms, seq } => {
            out.push(ACQUIRE_MANY);
            put_strs(out, names);
            put_str(out, owner);
            put_opt_u64(out, *ttl_ms);
            put_opt_u64(out, *session);
            put_opt_u64(out, *wait_ms);
            put_opt_str(out, request_id);
            put_opt_u64(out, *lock_delay_ms);
            put_opt_u64(out, *seq);
        }
        Command::ReleaseMany { names, token, request_id, session, seq } => {
            out.push(RELEASE_MANY);
            put_strs(out, names);
            put_u64(out, token.get());
            put_opt_str(out, request_id);
            put_opt_u64(out, *session);
            put_opt_u64(out, *seq);
        }
        Command::Cancel { name, owner } => {
            out.push(CANCEL);
            put_str(out, name);
            put_str(out, owner);
        }
        Command::PutRecord { key, lock, token, value, request_id } => {
            out.push(PUT_RECORD);
            put_str(out, key);
            put_str(out, lock);
            put_u64(out, token.get());
            put_str(out, value);
            put_opt_str(out, request_id);
        }
        Command::Gate { resource, lock, token, request_id } => {
            out.push(GATE);
            put_str(out, resource);
            put_str(out, lock);
            put_u64(out, token.get());
            put_opt_str(out, request_id);
        }
        Command::CreateSession { owner, ttl_ms, request_id, by } => {
            // Without a user, the layout earlier versions write and read.
            out.push(if by.is_some() { CREATE_SESSION_BY } else { CREATE_SESSION });
            put_str(out, owner);
            put_u64(out, *ttl_ms);
            put_opt_str(out, request_id);
            if let Some(by) = by {
                put_str(out, by);
            }
        }
        Command::KeepAlive { session, ttl_ms, request_id, seq } => {
            out.push(KEEP_ALIVE);
            put_u64(out, *session);
            put_opt_u64(out, *ttl_ms);
            put_opt_str(out, request_id);
            put_opt_u64(out, *seq);
        }
        Command::DeleteSession { session, request_id } => {
            out.push(DELETE_SESSION);
            put_u64(out, *session);
            put_opt_str(out, request_id);
        }
        Command::AcquireShared { name, owner, ttl_ms, session, wait_ms, request_id, seq } => {
            out.push(ACQUIRE_SHARED);
            put_str(out, name);
            put_str(out, owner);
            put_opt_u64(out, *ttl_ms);
            put_opt_u64(out, *session);
            put_opt_u64(out, *wait_ms);
            put_opt_str(out, request_id);
            put_opt_u64(out, *seq);
        }
        Command::RenewShared { name, owner, token, ttl_ms, request_id } => {
            out.push(RENEW_SHARED);
            put_holder(out, name, owner, *token);
            put_opt_u64(out, *ttl_ms);
            put_opt_str(out, request_id);
        }
        Command::ReleaseShared { name, owner, token, request_id } => {
            out.push(RELEASE_SHARED);
            put_holder(out, name, owner, *token);
            put_opt_str(out, request_id);
        }
        Command::AcquirePermits { name, owner, limit, permits, ttl_ms, session, wait_ms, request_id, seq } => {
            out.push(ACQUIRE_PERMITS);
            put_str(out, name);
            put_str(out, owner);
            put_u64(out, u64::from(*limit));
            put_opt_u64(out, permits.map(u64::from));
            put_opt_u64(out, *ttl_ms);
            put_opt_u64(out, *session);
            put_opt_u64(out, *wait_ms);
            put_opt_str(out, request_id);
            put_opt_u64(out, *seq);
        }
        Command::RenewPermits { name, owner, token, ttl_ms, request_id } => {
            out.push(RENEW_PERMITS);
            put_holder(out, name, owner, *token);
            put_opt_u64(out, *ttl_ms);
            put_opt_str(out, request_id);
        }
        Command::ReleasePermits { name, owner, token, request_id } => {
            out.push(RELEASE_PERMITS);
            put_holder(out, name, owner, *token);
            put_opt_str(out, request_id);
        }
        Command::CancelPermits { name, owner } => {
            out.push(CANCEL_PERMITS);
            put_str(out, name);
            put_str(out, owner);
        }
        Command::SetSemaphoreLimit { name, limit } => {
            out.push(SET_SEMAPHORE_LIMIT);
            put_str(out, name);
            put_u64(out, u64::from(*limit));
        }
        Command::Tick { period_ms } => {
            out.push(TICK);
            put_u64(out, *period_ms);
        }
        Command::Campaign { name, candidate, value, ttl_ms, session, wait_ms, request_id, lock_delay_ms, seq } => {
            out.push(CAMPAIGN);
            put_str(out, name);
            put_str(out, candidate);
            put_str(out, value);
            put_opt_u64(out, *ttl_ms);
            put_opt_u64(out, *session);
            put_opt_u64(out, *wait_ms);
            put_opt_str(out, request_id);
            put_opt_u64(out, *lock_delay_ms);
            put_opt_u64(out, *seq);
        }
        Command::Proclaim { name, candidate, token, value, request_id } => {
            out.push(PROCLAIM);
            put_str(out, name);
            put_str(out, candidate);
            put_u64(out, token.get());
            put_str(out, value);
            put_opt_str(out, request_id);
        }
        Command::Resign { name, candidate, token, request_id } => {
            out.push(RESIGN);
            put_str(out, name);
            put_str(out, candidate);
            put_u64(out, token.get());
            put_opt_str(out, request_id);
        }
        Command::AddUser { user, token } => {
            out.push(ADD_USER);
            put_str(out, user);
            put_opt_str(out, &token.as_ref().map(|t| t.0.clone()));
        }
        Command::RemoveUser { user } => {
            out.push(REMOVE_USER);
            put_str(out, user);
        }
        Command::AddToken { user, token } => {
            out.push(ADD_TOKEN);
            put_str(out, user);
            put_str(out, &token.0);
        }
        Command::RevokeToken { user, token_id } => {
            out.push(REVOKE_TOKEN);
            put_str(out, user);
            put_u64(out, *token_id);
        }
        Command::AddRole { role } => {
            out.push(ADD_ROLE);
            put_str(out, role);
        }
        Command::RemoveRole { role } => {
            out.push(REMOVE_ROLE);
            put_str(out, role);
        }
        Command::GrantPermission { role, permission, prefix } => {
            out.push(GRANT_PERMISSION);
            put_str(out, role);
            out.push(permission_tag(*permission));
            put_str(out, prefix);
        }
        Command::RevokePermission { role, permission, prefix } => {
            out.push(REVOKE_PERMISSION);
            put_str(out, role);
            out.push(permission_tag(*permission));
            put_str(out, prefix);
        }
        Command::AssignRole { user, role } => {
            out.push(ASSIGN_ROLE);
            put_str(out, user);
            put_str(out, role);
        }
        Command::UnassignRole { user, role } => {
            out.push(UNASSIGN_ROLE);
            put_str(out, user);
            put_str(out, role);
        }
    }
}

/// A permission's byte: never reuse one.
fn permission_tag(permission: Permission) -> u8 {
    match permission {
        Permission::Read => 1,
        Permission::Lock => 2,
        Permission::Fence => 3,
        Permission::Admin => 4,
    }
}

fn decode_command(r: &mut Reader<'_>) -> Result<Command, DecodeError> {
    Ok(match r.u8()? {
        ACQUIRE => Command::Acquire {
            name: r.string()?,
            owner: r.string()?,
            ttl_ms: r.opt_u64()?,
            session: r.opt_u64()?,
            wait_ms: r.opt_u64()?,
            request_id: r.opt_string()?,
            lock_delay_ms: r.opt_u64()?,
            seq: r.opt_u64()?,
        },
        RENEW => {
            Command::Renew { name: r.string()?, token: r.token()?, ttl_ms: r.opt_u64()?, request_id: r.opt_string()? }
        }
        RELEASE => Command::Release {
            name: r.string()?,
            token: r.token()?,
            request_id: r.opt_string()?,
            session: r.opt_u64()?,
            seq: r.opt_u64()?,
        },
        ACQUIRE_MANY => Command::AcquireMany {
            names: r.strings()?,
            owner: r.string()?,
            ttl_ms: r.opt_u64()?,
            session: r.opt_u64()?,
            wait_ms: r.opt_u64()?,
            request_id: r.opt_string()?,
            lock_delay_ms: r.opt_u64()?,
            seq: r.opt_u64()?,
        },
        RELEASE_MANY => Command::ReleaseMany {
            names: r.strings()?,
            token: r.token()?,
            request_id: r.opt_string()?,
            session: r.opt_u64()?,
            seq: r.opt_u64()?,
        },
        CANCEL => Command::Cancel { name: r.string()?, owner: r.string()? },
        PUT_RECORD => Command::PutRecord {
            key: r.string()?,
            lock: r.string()?,
            token: r.token()?,
            value: r.string()?,
            request_id: r.opt_string()?,
        },
        GATE => {
            Command::Gate { resource: r.string()?, lock: r.string()?, token: r.token()?, request_id: r.opt_string()? }
        }
        CREATE_SESSION => {
            Command::CreateSession { owner: r.string()?, ttl_ms: r.u64()?, request_id: r.opt_string()?, by: None }
        }
        CREATE_SESSION_BY => Command::CreateSession {
            owner: r.string()?,
            ttl_ms: r.u64()?,
            request_id: r.opt_string()?,
            by: Some(r.string()?),
        },
        KEEP_ALIVE => Command::KeepAlive {
            session: r.u64()?,
            ttl_ms: r.opt_u64()?,
            request_id: r.opt_string()?,
            seq: r.opt_u64()?,
        },
        DELETE_SESSION => Command::DeleteSession { session: r.u64()?, request_id: r.opt_string()? },
        ACQUIRE_SHARED => Command::AcquireShared {
            name: r.string()?,
            owner: r.string()?,
            ttl_ms: r.opt_u64()?,
            session: r.opt_u64()?,
            wait_ms: r.opt_u64()?,
            request_id: r.opt_string()?,
            seq: r.opt_u64()?,
        },
        ACQUIRE_SHARED_WITH_TTL => Command::AcquireShared {
            name: r.string()?,
            owner: r.string()?,
            ttl_ms: Some(r.u64()?),
            session: None,
            wait_ms: r.opt_u64()?,
            request_id: r.opt_string()?,
            seq: None,
        },
        RENEW_SHARED => Command::RenewShared {
            name: r.string()?,
            owner: r.string()?,
            token: r.token()?,
            ttl_ms: r.opt_u64()?,
            request_id: r.opt_string()?,
        },
        RELEASE_SHARED => Command::ReleaseShared {
            name: r.string()?,
            owner: r.string()?,
            token: r.token()?,
            request_id: r.opt_string()?,
        },
        ACQUIRE_PERMITS => Command::AcquirePermits {
            name: r.string()?,
            owner: r.string()?,
            limit: r.u32()?,
            permits: r.opt_u64()?.map(narrow).transpose()?,
            ttl_ms: r.opt_u64()?,
            session: r.opt_u64()?,
            wait_ms: r.opt_u64()?,
            request_id: r.opt_string()?,
            seq: r.opt_u64()?,
        },
        ACQUIRE_PERMITS_WITH_TTL => Command::AcquirePermits {
            name: r.string()?,
            owner: r.string()?,
            limit: r.u32()?,
            permits: r.opt_u64()?.map(narrow).transpose()?,
            ttl_ms: Some(r.u64()?),
            session: None,
            wait_ms: r.opt_u64()?,
            request_id: r.opt_string()?,
            seq: None,
        },
        RENEW_PERMITS => Command::RenewPermits {
            name: r.string()?,
            owner: r.string()?,
            token: r.token()?,
            ttl_ms: r.opt_u64()?,
            request_id: r.opt_string()?,
        },
        RELEASE_PERMITS => Command::ReleasePermits {
            name: r.string()?,
            owner: r.string()?,
            token: r.token()?,
            request_id: r.opt_string()?,
        },
        CANCEL_PERMITS => Command::CancelPermits { name: r.string()?, owner: r.string()? },
        SET_SEMAPHORE_LIMIT => Command::SetSemaphoreLimit { name: r.string()?, limit: r.u32()? },
        TICK => Command::Tick { period_ms: r.u64()? },
        CAMPAIGN => Command::Campaign {
            name: r.string()?,
            candidate: r.string()?,
            value: r.string()?,
            ttl_ms: r.opt_u64()?,
            session: r.opt_u64()?,
            wait_ms: r.opt_u64()?,
            request_id: r.opt_string()?,
            lock_delay_ms: r.opt_u64()?,
            seq: r.opt_u64()?,
        },
        PROCLAIM => Command::Proclaim {
            name: r.string()?,
            candidate: r.string()?,
            token: r.token()?,
            value: r.string()?,
            request_id: r.opt_string()?,
        },
        RESIGN => Command::Resign {
            name: r.string()?,
            candidate: r.string()?,
            token: r.token()?,
            request_id: r.opt_string()?,
        },
        ADD_USER => Command::AddUser { user: r.string()?, token: r.opt_string()?.map(TokenHash) },
        REMOVE_USER => Command::RemoveUser { user: r.string()? },
        ADD_TOKEN => Command::AddToken { user: r.string()?, token: TokenHash(r.string()?) },
        REVOKE_TOKEN => Command::RevokeToken { user: r.string()?, token_id: r.u64()? },
        ADD_ROLE => Command::AddRole { role: r.string()? },
        REMOVE_ROLE => Command::RemoveRole { role: r.string()? },
        GRANT_PERMISSION => {
            Command::GrantPermission { role: r.string()?, permission: r.permission()?, prefix: r.string()? }
        }
        REVOKE_PERMISSION => {
            Command::RevokePermission { role: r.string()?, permission: r.permission()?, prefix: r.string()? }
        }
        ASSIGN_ROLE => Command::AssignRole { user: r.string()?, role: r.string()? },
        UNASSIGN_ROLE => Command::UnassignRole { user: r.string()?, role: r.string()? },
        _ => return Err(DecodeError::Malformed("unknown command tag")),
    })
}

/// The lock or semaphore, owner and token a renew or release names.
fn put_holder(out: &mut Vec<u8>, name: &str, owner: &str, token: FencingToken) {
    put_str(out, name);
    put_str(out, owner);
    put_u64(out, token.get());
}

/// A varint that must fit 32 bits (a semaphore's limit or permits).
fn narrow(n: u64) -> Result<u32, DecodeError> {
    u32::try_from(n).map_err(|_| DecodeError::Malformed("a count over 32 bits"))
}

fn put_u64(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn put_opt_u64(out: &mut Vec<u8>, n: Option<u64>) {
    match n {
        Some(n) => {
            out.push(1);
            put_u64(out, n);
        }
        None => out.push(0),
    }
}

fn put_opt_str(out: &mut Vec<u8>, s: &Option<String>) {
    match s {
        Some(s) => {
            out.push(1);
            put_str(out, s);
        }
        None => out.push(0),
    }
}

fn put_strs(out: &mut Vec<u8>, list: &[String]) {
    put_u64(out, list.len() as u64);
    for s in list {
        put_str(out, s);
    }
}

/// Reads an encoded batch front to back.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn u8(&mut self) -> Result<u8, DecodeError> {
        let (&b, rest) = self.bytes.split_first().ok_or(DecodeError::Truncated)?;
        self.bytes = rest;
        Ok(b)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            let bits = u64::from(b & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(DecodeError::Malformed("varint overflows 64 bits"));
            }
            n |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(DecodeError::Malformed("varint longer than 10 bytes"))
    }

    /// A count or length, at most `max` (and never more than the bytes
    /// left could hold, so no allocation outgrows the input).
    fn len(&mut self, max: usize) -> Result<usize, DecodeError> {
        let n = usize::try_from(self.u64()?).map_err(|_| DecodeError::Malformed("length too large"))?;
        if n > max || n > self.bytes.len() {
            return Err(if n > max { DecodeError::Malformed("length too large") } else { DecodeError::Truncated });
        }
        Ok(n)
    }

    fn string(&mut self) -> Result<String, DecodeError> {
        let len = self.len(usize::MAX)?;
        let (text, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        String::from_utf8(text.to_vec()).map_err(|_| DecodeError::Malformed("string is not UTF-8"))
    }

    fn flag(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::Malformed("option flag is neither 0 nor 1")),
        }
    }

    /// A fencing token: its number, as [`u64`](Self::u64) reads it.
    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.u64().and_then(narrow)
    }

    fn token(&mut self) -> Result<FencingToken, DecodeError> {
        self.u64().map(FencingToken::granted_at)
    }

    fn opt_u64(&mut self) -> Result<Option<u64>, DecodeError> {
        Ok(if self.flag()? { Some(self.u64()?) } else { None })
    }

    fn opt_quotas(&mut self) -> Result<Option<Quotas>, DecodeError> {
        Ok(if self.flag()? { Some(Quotas { max_leases: self.u64()?, max_waiters: self.u64()? }) } else { None })
    }

    fn opt_string(&mut self) -> Result<Option<String>, DecodeError> {
        Ok(if self.flag()? { Some(self.string()?) } else { None })
    }

    fn actor(&mut self) -> Result<Option<Principal>, DecodeError> {
        Ok(match self.u8()? {
            NO_ACTOR => None,
            CLIENT_ACTOR => Some(Principal::Client),
            ADMIN_ACTOR => Some(Principal::Admin),
            USER_ACTOR => Some(Principal::User(self.string()?)),
            _ => return Err(DecodeError::Malformed("unknown actor")),
        })
    }

    fn permission(&mut self) -> Result<Permission, DecodeError> {
        Ok(match self.u8()? {
            1 => Permission::Read,
            2 => Permission::Lock,
            3 => Permission::Fence,
            4 => Permission::Admin,
            _ => return Err(DecodeError::Malformed("unknown permission")),
        })
    }

    fn strings(&mut self) -> Result<Vec<String>, DecodeError> {
        let n = self.len(usize::MAX)?;
        (0..n).map(|_| self.string()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One command of every kind, options both set and not.
    fn every_command() -> Vec<Command> {
        let id = || Some("req-1".to_string());
        vec![
            Command::Acquire {
                name: "a/b c".into(),
                owner: "ö-owner".into(),
                ttl_ms: Some(10_000),
                session: None,
                wait_ms: Some(u64::MAX),
                request_id: id(),
                lock_delay_ms: None,
                seq: Some(0),
            },
            Command::Renew { name: "a".into(), token: FencingToken::granted_at(300), ttl_ms: None, request_id: None },
            Command::Release {
                name: "a".into(),
                token: FencingToken::granted_at(1 << 40),
                request_id: id(),
                session: Some(7),
                seq: Some(8),
            },
            Command::AcquireMany {
                names: vec!["x".into(), "y".into()],
                owner: "o".into(),
                ttl_ms: None,
                session: Some(3),
                wait_ms: None,
                request_id: None,
                lock_delay_ms: Some(5),
                seq: Some(1),
            },
            Command::ReleaseMany {
                names: vec![],
                token: FencingToken::granted_at(9),
                request_id: None,
                session: None,
                seq: None,
            },
            Command::Cancel { name: "a".into(), owner: "o".into() },
            Command::PutRecord {
                key: "k".into(),
                lock: "l".into(),
                token: FencingToken::granted_at(2),
                value: "{\"x\":1}".into(),
                request_id: id(),
            },
            Command::Gate {
                resource: "g".into(),
                lock: "l".into(),
                token: FencingToken::granted_at(0),
                request_id: None,
            },
            Command::CreateSession { owner: "o".into(), ttl_ms: 1, request_id: id(), by: None },
            Command::CreateSession { owner: "o".into(), ttl_ms: 1, request_id: None, by: Some("alice".into()) },
            Command::KeepAlive { session: 4, ttl_ms: Some(2), request_id: None, seq: None },
            Command::DeleteSession { session: 4, request_id: id() },
            Command::AcquireShared {
                name: "r".into(),
                owner: "o".into(),
                ttl_ms: Some(5000),
                session: None,
                wait_ms: Some(10),
                request_id: None,
                seq: None,
            },
            Command::AcquireShared {
                name: "r".into(),
                owner: "o".into(),
                ttl_ms: None,
                session: Some(6),
                wait_ms: None,
                request_id: id(),
                seq: Some(2),
            },
            Command::RenewShared {
                name: "r".into(),
                owner: "o".into(),
                token: FencingToken::granted_at(4),
                ttl_ms: None,
                request_id: None,
            },
            Command::ReleaseShared {
                name: "r".into(),
                owner: "o".into(),
                token: FencingToken::granted_at(4),
                request_id: Some("q".into()),
            },
            Command::AcquirePermits {
                name: "s".into(),
                owner: "o".into(),
                limit: 3,
                permits: Some(2),
                ttl_ms: Some(5000),
                session: None,
                wait_ms: None,
                request_id: Some("p".into()),
                seq: None,
            },
            Command::AcquirePermits {
                name: "s".into(),
                owner: "o".into(),
                limit: 3,
                permits: None,
                ttl_ms: None,
                session: Some(6),
                wait_ms: Some(9),
                request_id: None,
                seq: Some(3),
            },
            Command::RenewPermits {
                name: "s".into(),
                owner: "o".into(),
                token: FencingToken::granted_at(5),
                ttl_ms: Some(4000),
                request_id: None,
            },
            Command::ReleasePermits {
                name: "s".into(),
                owner: "o".into(),
                token: FencingToken::granted_at(5),
                request_id: None,
            },
            Command::CancelPermits { name: "s".into(), owner: "o".into() },
            Command::SetSemaphoreLimit { name: "s".into(), limit: 7 },
            Command::Tick { period_ms: 100 },
            Command::Campaign {
                name: "e".into(),
                candidate: "c".into(),
                value: "\"v\"".into(),
                ttl_ms: Some(5000),
                session: None,
                wait_ms: Some(7),
                request_id: id(),
                lock_delay_ms: None,
                seq: None,
            },
            Command::Proclaim {
                name: "e".into(),
                candidate: "c".into(),
                token: FencingToken::granted_at(3),
                value: "1".into(),
                request_id: None,
            },
            Command::Resign {
                name: "e".into(),
                candidate: "c".into(),
                token: FencingToken::granted_at(3),
                request_id: id(),
            },
            Command::AddUser { user: "u".into(), token: Some(TokenHash("ab".repeat(32))) },
            Command::AddUser { user: "u".into(), token: None },
            Command::RemoveUser { user: "u".into() },
            Command::AddToken { user: "u".into(), token: TokenHash("cd".repeat(32)) },
            Command::RevokeToken { user: "u".into(), token_id: 300 },
            Command::AddRole { role: "r".into() },
            Command::RemoveRole { role: "r".into() },
            Command::GrantPermission { role: "r".into(), permission: Permission::Fence, prefix: "team-a/".into() },
            Command::RevokePermission { role: "r".into(), permission: Permission::Admin, prefix: String::new() },
            Command::AssignRole { user: "u".into(), role: "r".into() },
            Command::UnassignRole { user: "u".into(), role: "r".into() },
        ]
    }

    /// Who proposed each command of `every_command`: every kind of actor
    /// in turn, and nobody.
    fn every_actor(commands: &[Command]) -> Vec<Option<Principal>> {
        let kinds = [None, Some(Principal::Client), Some(Principal::Admin), Some(Principal::User("ålice".into()))];
        (0..commands.len()).map(|i| kinds[i % kinds.len()].clone()).collect()
    }

    fn decoded(commands: Vec<Command>, actors: Vec<Option<Principal>>, quotas: Option<Quotas>) -> Decoded {
        Decoded { commands, actors, quotas }
    }

    fn nobody(commands: &[Command]) -> Vec<Option<Principal>> {
        vec![None; commands.len()]
    }

    // Ensures every command comes back as it went in, with its actor, with
    // the entry's quotas or without.
    #[test]
    fn every_command_round_trips() {
        let commands = every_command();
        for actors in [every_actor(&commands), nobody(&commands)] {
            for quotas in [None, Some(Quotas { max_leases: 200, max_waiters: u64::MAX })] {
                let mut bytes = Vec::new();
                encode(&commands, &actors, quotas, &mut bytes);
                assert_eq!(decode(&bytes), Ok(decoded(commands.clone(), actors.clone(), quotas)));
            }
        }
    }

    // Ensures a batch without actors (a Tick's) is written in version 2,
    // byte for byte what earlier versions write, and one with actors costs
    // one byte per command (and a user's name).
    #[test]
    fn batches_without_actors_keep_the_earlier_layout() {
        let tick = [Command::Tick { period_ms: 100 }];
        let mut bytes = Vec::new();
        encode(&tick, &nobody(&tick), None, &mut bytes);
        assert_eq!(bytes, [VERSION_WITHOUT_ACTORS, 0, 1, TICK, 100]);
        let cancel = [Command::Cancel { name: "a".into(), owner: "o".into() }];
        let (mut plain, mut by_admin, mut by_user) = (Vec::new(), Vec::new(), Vec::new());
        encode(&cancel, &nobody(&cancel), None, &mut plain);
        encode(&cancel, &[Some(Principal::Admin)], None, &mut by_admin);
        encode(&cancel, &[Some(Principal::User("bob".into()))], None, &mut by_user);
        assert_eq!((by_admin.len(), by_user.len()), (plain.len() + 1, plain.len() + 5));
        assert_eq!(by_admin[0], VERSION);
    }

    // Ensures an entry of version 2, as the previous version wrote it (no
    // actors), and of version 1 (no quotas either) still read, as commands
    // by nobody recorded, the latter without limits.
    #[test]
    fn entries_without_actors_or_quotas_still_read() {
        let commands = every_command();
        let quotas = Some(Quotas { max_leases: 5, max_waiters: 6 });
        let mut bytes = Vec::new();
        encode(&commands, &nobody(&commands), quotas, &mut bytes);
        assert_eq!(bytes[0], VERSION_WITHOUT_ACTORS);
        assert_eq!(decode(&bytes), Ok(decoded(commands.clone(), nobody(&commands), quotas)));
        let mut bytes = Vec::new();
        encode(&commands, &nobody(&commands), None, &mut bytes);
        // Version 2 without quotas is version 1 with a 0 flag after the version.
        assert_eq!(bytes.remove(1), 0);
        bytes[0] = VERSION_WITHOUT_QUOTAS;
        assert_eq!(decode(&bytes), Ok(decoded(commands.clone(), nobody(&commands), None)));
    }

    // Ensures a shared acquire and a permits acquire as logs of earlier
    // versions hold them (a plain ttl, before they took a session) still
    // read, as acquires with that ttl.
    #[test]
    fn acquires_with_a_plain_ttl_still_read() {
        let (owner, ttl) = ([1, b'o'], [0x88, 0x27]);
        let mut bytes = vec![VERSION_WITHOUT_ACTORS, 0, 2, ACQUIRE_SHARED_WITH_TTL];
        bytes.extend([&[1, b'r'][..], &owner, &ttl, &[1, 10], &[0]].concat());
        bytes.push(ACQUIRE_PERMITS_WITH_TTL);
        bytes.extend([&[1, b's'][..], &owner, &[3, 1, 2], &ttl, &[0], &[1, 1, b'p']].concat());
        let with_ttl = |c: &Command| {
            matches!(c, Command::AcquireShared { session: None, .. } | Command::AcquirePermits { session: None, .. })
        };
        let expected: Vec<Command> = every_command().into_iter().filter(with_ttl).collect();
        assert_eq!(decode(&bytes), Ok(decoded(expected, vec![None, None], None)));
    }

    // Ensures every cut, every flipped byte and a few hostile headers are
    // refused with an error, never a panic or a huge allocation.
    #[test]
    fn malformed_batches_are_refused() {
        let mut bytes = Vec::new();
        let commands = every_command();
        encode(&commands, &every_actor(&commands), Some(Quotas { max_leases: 1 << 40, max_waiters: 3 }), &mut bytes);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut} decoded");
        }
        for i in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0xff;
            let _ = decode(&flipped);
        }
        assert_eq!(decode(&[4, 0, 0]), Err(DecodeError::Version(4)));
        assert!(decode(&[VERSION, 0, 1, 4, CANCEL, 0, 0]).is_err(), "an unknown actor");
        assert!(decode(&[VERSION, 2, 0]).is_err(), "a quotas flag that is neither 0 nor 1");
        assert!(decode(&[VERSION, 0, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err(), "a count of billions");
        assert!(decode(&[VERSION, 0, 1, RENEW, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err(), "a string of gigabytes");
        let tick = [VERSION, 0, 1, TICK, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert!(decode(&tick).is_err());
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(decode(&trailing).is_err());
    }
}
