//! `GET /openapi.json`: the HTTP API described in OpenAPI 3.1 (utoipa).
//!
//! The document is built from [`OPERATIONS`], one row per routed method and
//! path (with its `operationId`), and from the `leasehold-proto` types the
//! handlers parse and answer with (their schemas, with the bounds of
//! `Limits`, come from `leasehold_proto::schema`). `tests/cluster/openapi.rs`
//! checks it against the router both ways, so a route added without a row
//! (or a row without a route) fails the suite; `src/api/tests.rs` checks it
//! against the committed `docs/openapi.json`. The refusals that come before
//! any handler (TLS, the JSON body, a missing or wrong token, the request
//! deadline, leader forwarding, the in-flight bound) are added to every row
//! they apply to, as the router layers them ([`error_statuses`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::routing::get;
use axum::{Json, Router};
use utoipa::openapi::header::{Header, HeaderBuilder};
use utoipa::openapi::path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn, PathItem};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::response::{ResponseBuilder, ResponsesBuilder};
use utoipa::openapi::schema::{Object, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Content, InfoBuilder, OpenApi, OpenApiBuilder, PathsBuilder, Ref, Required};
use utoipa::{IntoParams, OpenApi as _};

use super::auth::{Part, SecretKind};
use crate::node::Node;
use leasehold_proto::auth::{
    AssignRoleRequest, CreateRoleRequest, CreateUserRequest, GrantView, Removed, RoleList, RoleView, TokenCreated,
    UserList, UserView, WhoAmI,
};
use leasehold_proto::cluster::{
    ClusterStatus, Health, InitRequest, InitResponse, MembershipRequest, MembershipResponse, NewMember, NodesResponse,
    Readiness, SnapshotTaken, StatusQuery,
};
use leasehold_proto::elections::{CampaignRequest, Leader, LeaderList, ProclaimRequest, ResignRequest, ResignResponse};
use leasehold_proto::events::{EventsQuery, ResumeQuery};
use leasehold_proto::fence::{
    CheckRequest, CheckResponse, GateRequest, GateResponse, PutRecordRequest, PutRecordResponse, Record,
};
use leasehold_proto::locks::{
    AcquireRequest, LeaseResponse, LeaseView, ListQuery, ListResponse, MultiAcquireRequest, MultiLeaseResponse,
    MultiReleaseRequest, MultiReleaseResponse, ReleaseRequest, ReleaseResponse, RenewRequest, SharedHoldersResponse,
    SharedLockView,
};
use leasehold_proto::semaphores::{
    PermitResponse, SemaphoreAcquireRequest, SemaphoreLimitRequest, SemaphoreLimitResponse, SemaphoreListResponse,
    SemaphoreReleaseRequest, SemaphoreReleaseResponse, SemaphoreRenewRequest, SemaphoreView,
};
use leasehold_proto::sessions::{
    CreateSessionRequest, DeleteSessionQuery, DeleteSessionResponse, KeepAliveRequest, SessionListQuery,
    SessionListResponse, SessionView,
};
use leasehold_proto::{schema, ErrorBody, Limits, LockEvent, LEADER_ADDR_HEADER, LEADER_HEADER};

pub fn routes() -> Router<Arc<Node>> {
    Router::new().route("/openapi.json", get(|| async { Json(document_json()) }))
}

/// A request or response body: a named schema, or JSON of any shape.
#[derive(Clone, Copy)]
enum Body {
    Named(&'static str),
    AnyJson,
    Text(&'static str),
    None,
}

/// One routed method on one path: method, path, tag, the part of the API
/// whose tokens it asks for (`None`: open to all, even on a node with
/// secrets), its `operationId`, its
/// summary, request body, the success answer's status and body, and the
/// errors its handler answers with, as (status, the codes it can carry).
/// The errors of the layers in front of the handler are added by
/// [`error_statuses`].
struct Operation(
    HttpMethod,
    &'static str,
    &'static str,
    Option<Part>,
    &'static str,
    &'static str,
    Body,
    (u16, Body),
    &'static [(u16, &'static str)],
);

use Body::{AnyJson, Named, Text};
use HttpMethod::{Delete, Get, Post, Put};
use Part::{Admin, Client, Observe, Raft};

/// Handler errors shared by many rows.
const BAD: (u16, &str) = (400, "invalid_argument");
const NOT_HELD: (u16, &str) = (404, "not_held");
const MUTATION: &[(u16, &str)] = &[BAD, NOT_HELD, (409, "stale_token, seq_too_old, seq_reused, request_id_reused")];
const NO_SESSION: (u16, &str) = (404, "session_not_found");
const COMPACTED: (u16, &str) = (410, "compacted");

/// Every routed method and path. Leader-only operations may also answer 503
/// (no leader, or the leader unreachable from the node asked).
#[rustfmt::skip]
const OPERATIONS: &[Operation] = &[
    Operation(Get, "/v1/locks", "locks", Some(Client), "listLocks", "Held locks in name order (`prefix`, `limit` query parameters), and those held in shared mode with their holders; linearizable", Body::None, (200, Named("ListResponse")), &[BAD]),
    Operation(Get, "/v1/locks/{name}", "locks", Some(Client), "getLock", "One held lock with its queue; 404 `not_held` when free (with `delayed_until_tick` while a lock delay runs); linearizable", Body::None, (200, Named("LeaseView")), &[BAD, NOT_HELD]),
    Operation(Get, "/v1/locks/{name}/shared", "locks", Some(Client), "getLockHolders", "Who holds the lock: its shared holders (oldest grant first) and its exclusive holder, if any; linearizable", Body::None, (200, Named("SharedHoldersResponse")), &[BAD]),
    Operation(Post, "/v1/locks/{name}/acquire", "locks", Some(Client), "acquireLock", "Acquire with a `ttl_ms` or under a `session`, exclusive or (`mode: \"shared\"`) shared, or with `wait_ms` wait in the lock's FIFO queue (409 `deadlock` at once when waiting would close a cycle); the grant carries the fencing token", Named("AcquireRequest"), (200, Named("LeaseResponse")), &[BAD, NO_SESSION, (409, "held, lock_delayed, reserved, wait_timeout, deadlock, seq_too_old, seq_reused, request_id_reused"), (507, "full")]),
    Operation(Post, "/v1/locks/{name}/renew", "locks", Some(Client), "renewLock", "Restart the lease of the holder of `token` (a shared holder names `mode: \"shared\"` and its `owner`; 409 `held_under_session` for a lease, shared or not, held under a session)", Named("RenewRequest"), (200, Named("LeaseResponse")), &[BAD, NOT_HELD, (409, "stale_token, held_under_session, request_id_reused")]),
    Operation(Post, "/v1/locks/{name}/release", "locks", Some(Client), "releaseLock", "Release the lease held under `token` (a shared holder names `mode: \"shared\"` and its `owner`)", Named("ReleaseRequest"), (200, Named("ReleaseResponse")), MUTATION),
    Operation(Post, "/v1/multi/acquire", "locks", Some(Client), "acquireLocks", "Acquire every lock of `names` in one log entry, or none (one token for all), with a `ttl_ms` or under a `session`; with `wait_ms` wait until all can be granted together, holding none meanwhile", Named("MultiAcquireRequest"), (200, Named("MultiLeaseResponse")), &[BAD, NO_SESSION, (409, "held, wait_timeout, seq_too_old, seq_reused, request_id_reused"), (507, "full")]),
    Operation(Post, "/v1/multi/release", "locks", Some(Client), "releaseLocks", "Release every lock of `names`, all held under `token`, or none", Named("MultiReleaseRequest"), (200, Named("MultiReleaseResponse")), MUTATION),
    Operation(Get, "/v1/semaphores", "semaphores", Some(Client), "listSemaphores", "Live semaphores in name order (`prefix`, `limit` query parameters); linearizable", Body::None, (200, Named("SemaphoreListResponse")), &[BAD]),
    Operation(Get, "/v1/semaphores/{name}", "semaphores", Some(Client), "getSemaphore", "One live semaphore: limit, holders and waiters; 404 `no_semaphore` when nobody holds or waits for a permit; linearizable", Body::None, (200, Named("SemaphoreView")), &[BAD, (404, "no_semaphore")]),
    Operation(Post, "/v1/semaphores/{name}/acquire", "semaphores", Some(Client), "acquirePermits", "Take `permits` (default 1) of the semaphore, all or none, for `ttl_ms` or under a `session` (they return when it ends); the first acquire sets its `limit`; with `wait_ms` wait in its FIFO queue (409 `deadlock` at once when waiting would close a cycle); the grant carries its own fencing token", Named("SemaphoreAcquireRequest"), (200, Named("PermitResponse")), &[BAD, NO_SESSION, (409, "semaphore_full, limit_mismatch, wait_timeout, deadlock, seq_too_old, seq_reused, request_id_reused"), (507, "full")]),
    Operation(Post, "/v1/semaphores/{name}/renew", "semaphores", Some(Client), "renewPermits", "Restart the lease of `owner`'s permits held under `token` (409 `held_under_session` for permits held under a session)", Named("SemaphoreRenewRequest"), (200, Named("PermitResponse")), &[BAD, (404, "not_held, no_semaphore"), (409, "stale_token, held_under_session, request_id_reused")]),
    Operation(Post, "/v1/semaphores/{name}/release", "semaphores", Some(Client), "releasePermits", "Return `owner`'s permits held under `token`; the waiters that now fit are granted in the same entry", Named("SemaphoreReleaseRequest"), (200, Named("SemaphoreReleaseResponse")), &[BAD, (404, "not_held, no_semaphore"), (409, "stale_token, request_id_reused")]),
    Operation(Post, "/v1/semaphores/{name}/limit", "semaphores", Some(Admin), "setSemaphoreLimit", "Change a live semaphore's limit: a higher one grants the waiters that now fit, a lower one revokes no permit", Named("SemaphoreLimitRequest"), (200, Named("SemaphoreLimitResponse")), &[BAD, (404, "no_semaphore")]),
    Operation(Get, "/v1/sessions", "sessions", Some(Client), "listSessions", "Live sessions in id order, without their locks (`after`, `limit` query parameters); linearizable", Body::None, (200, Named("SessionListResponse")), &[BAD]),
    Operation(Post, "/v1/sessions", "sessions", Some(Client), "createSession", "Open a session for `owner` with `ttl_ms`; its id is the index of the entry that created it", Named("CreateSessionRequest"), (200, Named("SessionView")), &[BAD, (409, "request_id_reused"), (507, "full")]),
    Operation(Get, "/v1/sessions/{id}", "sessions", Some(Client), "getSession", "One session with the locks it holds; linearizable", Body::None, (200, Named("SessionView")), &[BAD, NO_SESSION]),
    Operation(Delete, "/v1/sessions/{id}", "sessions", Some(Client), "deleteSession", "End the session: release every lock it holds (each handed to its first waiter) and take its waiters out of their queues, in one entry", Body::None, (200, Named("DeleteSessionResponse")), &[BAD, NO_SESSION, (409, "request_id_reused")]),
    Operation(Post, "/v1/sessions/{id}/keepalive", "sessions", Some(Client), "keepAliveSession", "Restart the session's deadline (with `ttl_ms`, or its own): one entry, whatever it holds", Named("KeepAliveRequest"), (200, Named("SessionView")), &[BAD, NO_SESSION, (409, "seq_too_old, seq_reused, request_id_reused")]),
    Operation(Get, "/v1/locks/{name}/events", "events", Some(Client), "lockEvents", "The lock's applied events as Server-Sent Events (`data`: a LockEvent; `id`: its place in the log); resumes after `after` or `Last-Event-ID` on any node; served by the node asked", Body::None, (200, Text("text/event-stream")), &[BAD, COMPACTED]),
    Operation(Get, "/v1/events", "events", Some(Client), "allEvents", "Every lock's applied events (or those under `prefix`) as Server-Sent Events (`data`: a LockEvent; `id`: its place in the log); resumes after `after` or `Last-Event-ID` on any node; served by the node asked", Body::None, (200, Text("text/event-stream")), &[BAD, COMPACTED]),
    Operation(Get, "/v1/elections", "elections", Some(Client), "listElections", "Elections with a leader, in name order (`prefix`, `limit` query parameters); linearizable", Body::None, (200, Named("LeaderList")), &[BAD]),
    Operation(Get, "/v1/elections/{name}", "elections", Some(Client), "getLeader", "The leader of the election (candidate, value, token, since_tick) and the log index the read reflects; 404 `no_leader`; linearizable", Body::None, (200, Named("Leader")), &[BAD, (404, "no_leader")]),
    Operation(Post, "/v1/elections/{name}/campaign", "elections", Some(Client), "campaign", "Stand as `candidate` announcing `value`, with a `ttl_ms` or under a `session`; with `wait_ms` wait in FIFO order to be elected; the leader's token is the index of the entry that elected it", Named("CampaignRequest"), (200, Named("Leader")), &[BAD, NO_SESSION, (409, "held, lock_delayed, reserved, wait_timeout, seq_too_old, seq_reused, request_id_reused"), (507, "full")]),
    Operation(Post, "/v1/elections/{name}/proclaim", "elections", Some(Client), "proclaim", "The leader under `token` announces a new `value`", Named("ProclaimRequest"), (200, Named("Leader")), MUTATION),
    Operation(Post, "/v1/elections/{name}/resign", "elections", Some(Client), "resign", "The leader under `token` steps down; the next waiting candidate is elected in the same entry", Named("ResignRequest"), (200, Named("ResignResponse")), MUTATION),
    Operation(Get, "/v1/elections/{name}/observe", "events", Some(Client), "observeElection", "The election's leadership changes as Server-Sent Events (`proclaimed`, `released`, `expired`), starting with the current leader; resumes after `after` or `Last-Event-ID` on any node; served by the node asked", Body::None, (200, Text("text/event-stream")), &[BAD, COMPACTED]),
    Operation(Post, "/v1/fence/check", "fence", Some(Client), "checkToken", "Is `token` the current token of `lock`? (linearizable)", Named("CheckRequest"), (200, Named("CheckResponse")), &[BAD]),
    Operation(Post, "/v1/fence/gate/{resource}", "fence", Some(Client), "passGate", "Admit `token` if it is the current token of `lock` and no higher token was admitted", Named("GateRequest"), (200, Named("GateResponse")), &[BAD, (409, "stale_token, lock_mismatch, request_id_reused"), (507, "full")]),
    Operation(Put, "/v1/records/{key}", "fence", Some(Client), "putRecord", "Write a record only if `token` is current, in the same Raft entry as the check", Named("PutRecordRequest"), (200, Named("PutRecordResponse")), &[BAD, (409, "stale_token, request_id_reused"), (507, "full")]),
    Operation(Get, "/v1/records/{key}", "fence", Some(Client), "getRecord", "Read a fenced record (linearizable)", Body::None, (200, Named("Record")), &[BAD, (404, "no_record")]),
    Operation(Get, "/v1/auth/whoami", "auth", Some(Client), "whoAmI", "The principal the token presented is (`client`, `admin` or a `user`) and the permissions it has, each on a name prefix", Body::None, (200, Named("WhoAmI")), &[]),
    Operation(Get, "/v1/auth/users", "auth", Some(Admin), "listUsers", "Every user with its roles and the ids of its live tokens (never a token); linearizable", Body::None, (200, Named("UserList")), &[]),
    Operation(Post, "/v1/auth/users", "auth", Some(Admin), "createUser", "Add a user with a first token, shown in this answer only (the cluster keeps its SHA-256)", Named("CreateUserRequest"), (200, Named("TokenCreated")), &[BAD, (409, "already_exists"), (507, "full")]),
    Operation(Delete, "/v1/auth/users/{name}", "auth", Some(Admin), "removeUser", "Remove a user: from the entry that removes it, its tokens open nothing on any node", Body::None, (200, Named("Removed")), &[BAD, (404, "no_user")]),
    Operation(Post, "/v1/auth/users/{name}/tokens", "auth", Some(Admin), "addUserToken", "Add a token to a user (to rotate without a gap), shown in this answer only", Body::None, (200, Named("TokenCreated")), &[BAD, (404, "no_user"), (507, "full")]),
    Operation(Delete, "/v1/auth/users/{name}/tokens/{id}", "auth", Some(Admin), "revokeUserToken", "Revoke a user's token: from the entry that revokes it, it opens nothing on any node", Body::None, (200, Named("Removed")), &[BAD, (404, "no_user, no_token")]),
    Operation(Post, "/v1/auth/users/{name}/roles", "auth", Some(Admin), "assignRole", "Give a user a role", Named("AssignRoleRequest"), (200, Named("UserView")), &[BAD, (404, "no_user, no_role"), (507, "full")]),
    Operation(Delete, "/v1/auth/users/{name}/roles/{role}", "auth", Some(Admin), "unassignRole", "Take a role from a user", Body::None, (200, Named("UserView")), &[BAD, (404, "no_user")]),
    Operation(Get, "/v1/auth/roles", "auth", Some(Admin), "listRoles", "Every role with its grants; linearizable", Body::None, (200, Named("RoleList")), &[]),
    Operation(Post, "/v1/auth/roles", "auth", Some(Admin), "createRole", "Add a role, granting nothing yet", Named("CreateRoleRequest"), (200, Named("RoleView")), &[BAD, (409, "already_exists"), (507, "full")]),
    Operation(Delete, "/v1/auth/roles/{name}", "auth", Some(Admin), "removeRole", "Remove a role, and take it from every user", Body::None, (200, Named("Removed")), &[BAD, (404, "no_role")]),
    Operation(Post, "/v1/auth/roles/{name}/grants", "auth", Some(Admin), "grantPermission", "Grant a permission on the names that start with `prefix` (`\"\"`: every name; `admin` counts there only)", Named("GrantView"), (200, Named("RoleView")), &[BAD, (404, "no_role"), (507, "full")]),
    Operation(Post, "/v1/auth/roles/{name}/revoke", "auth", Some(Admin), "revokePermission", "Take the grant of exactly this permission on exactly this prefix from the role", Named("GrantView"), (200, Named("RoleView")), &[BAD, (404, "no_role")]),
    Operation(Get, "/v1/cluster/status", "admin", Some(Observe), "clusterStatus", "This node's view: role, leader, term, indexes, tick, members, replication (leader); with `digest=true` (admin token only) a digest of its table, from a checkpoint it takes first, one at a time with snapshots and backups", Body::None, (200, Named("ClusterStatus")), &[BAD, (503, "unavailable")]),
    Operation(Get, "/v1/cluster/nodes", "admin", Some(Observe), "clusterNodes", "Every member's own status, with the replication lag the leader reports", Body::None, (200, Named("NodesResponse")), &[]),
    Operation(Post, "/v1/cluster/init", "admin", Some(Admin), "initCluster", "Initialize a new cluster with these members (this node alone when empty)", Named("InitRequest"), (200, Named("InitResponse")), &[BAD, (409, "already_initialized")]),
    Operation(Post, "/v1/cluster/learners", "admin", Some(Admin), "addLearner", "Add a non-voting member and wait until it has caught up", Named("NewMember"), (200, Named("MembershipResponse")), &[BAD]),
    Operation(Post, "/v1/cluster/membership", "admin", Some(Admin), "changeMembership", "Make exactly these members voters", Named("MembershipRequest"), (200, Named("MembershipResponse")), &[BAD, (404, "not_member"), (409, "would_lose_quorum")]),
    Operation(Post, "/v1/cluster/members/{id}/promote", "admin", Some(Admin), "promoteMember", "Make learner `id` a voter", Body::None, (200, Named("MembershipResponse")), &[BAD, (404, "not_member"), (409, "would_lose_quorum")]),
    Operation(Delete, "/v1/cluster/members/{id}", "admin", Some(Admin), "removeMember", "Remove member `id` from the cluster", Body::None, (200, Named("MembershipResponse")), &[BAD, (404, "not_member"), (409, "would_lose_quorum")]),
    Operation(Post, "/v1/cluster/snapshot", "admin", Some(Admin), "takeSnapshot", "This node snapshots everything it has applied; answers once stored (no leader needed); one at a time with digests and backups", Body::None, (200, Named("SnapshotTaken")), &[(503, "unavailable")]),
    Operation(Get, "/v1/cluster/snapshot", "admin", Some(Admin), "downloadSnapshot", "This node's current snapshot as a backup file (snapshot format 2, binary) for `leasehold restore`; written one at a time with digests and snapshots", Body::None, (200, Text("application/octet-stream")), &[(404, "no_snapshot")]),
    Operation(Get, "/healthz", "admin", None, "health", "200 while the process serves and its Raft runs; names the leader if known; 503 `unavailable` (`reason: stopped`) once Raft has stopped (a storage error): restart the node", Body::None, (200, Named("Health")), &[(503, "unavailable")]),
    Operation(Get, "/readyz", "admin", None, "ready", "200 when this node knows a leader that heard from a quorum within the election timeout and has applied what it knows committed; else 503 `unavailable` with a `reason`", Body::None, (200, Named("Readiness")), &[(503, "unavailable")]),
    Operation(Get, "/metrics", "observe", None, "metrics", "Prometheus series in OpenMetrics text", Body::None, (200, Text("application/openmetrics-text")), &[]),
    Operation(Get, "/", "observe", None, "statusPage", "The status page", Body::None, (200, Text("text/html")), &[]),
    Operation(Get, "/ui", "observe", None, "statusPageUi", "The status page", Body::None, (200, Text("text/html")), &[]),
    Operation(Get, "/openapi.json", "observe", Some(Observe), "openapi", "This document", Body::None, (200, AnyJson), &[]),
    Operation(Post, crate::raft::APPEND_PATH, "raft", Some(Raft), "raftAppend", "Inbound Raft AppendEntries (members only; over HTTP only where the peer transport cannot be dialed, never on a node with a peer port)", AnyJson, (200, AnyJson), &[BAD, (500, "internal")]),
    Operation(Post, crate::raft::VOTE_PATH, "raft", Some(Raft), "raftVote", "Inbound Raft vote request (members only; over HTTP only where the peer transport cannot be dialed, never on a node with a peer port)", AnyJson, (200, AnyJson), &[BAD, (500, "internal")]),
    Operation(Post, crate::raft::SNAPSHOT_PATH, "raft", Some(Raft), "raftSnapshot", "Inbound Raft snapshot, streamed (members only; from nodes without the peer snapshot channel, never on a node with a peer port)", Text("application/octet-stream"), (200, AnyJson), &[BAD, (500, "internal")]),
];

/// Every routed method and path with the part that guards it and the
/// named schema of its request body, for the tests that walk every route.
#[cfg(test)]
pub(super) fn operations() -> impl Iterator<Item = (&'static str, &'static str, Option<Part>, Option<&'static str>)> {
    OPERATIONS.iter().map(|Operation(method, path, _, part, _, _, request, ..)| {
        let method = match method {
            Get => "GET",
            Post => "POST",
            Put => "PUT",
            Delete => "DELETE",
            _ => "OPTIONS",
        };
        let body = match request {
            Named(name) => Some(*name),
            _ => None,
        };
        (method, *path, *part, body)
    })
}

/// Served by the leader: a follower forwards them (see [`super::forward`]).
fn forwarded(o: &Operation) -> bool {
    let Operation(_, path, _, part, ..) = o;
    match part {
        Some(Client) => !path.contains("events") && !path.ends_with("/observe"),
        Some(Admin) => !path.ends_with("/init") && !path.ends_with("/snapshot"),
        _ => false,
    }
}

/// The named schemas of the request and response bodies.
#[derive(utoipa::OpenApi)]
#[openapi(components(schemas(
    AcquireRequest,
    RenewRequest,
    ReleaseRequest,
    LeaseResponse,
    ReleaseResponse,
    LeaseView,
    ListResponse,
    MultiAcquireRequest,
    MultiLeaseResponse,
    MultiReleaseRequest,
    MultiReleaseResponse,
    CreateSessionRequest,
    KeepAliveRequest,
    SessionView,
    SessionListResponse,
    DeleteSessionResponse,
    LockEvent,
    CampaignRequest,
    ProclaimRequest,
    ResignRequest,
    ResignResponse,
    Leader,
    LeaderList,
    CheckRequest,
    CheckResponse,
    GateRequest,
    GateResponse,
    PutRecordRequest,
    PutRecordResponse,
    Record,
    ClusterStatus,
    NodesResponse,
    Health,
    Readiness,
    InitRequest,
    InitResponse,
    NewMember,
    MembershipRequest,
    MembershipResponse,
    SnapshotTaken,
    SharedHoldersResponse,
    SharedLockView,
    SemaphoreAcquireRequest,
    SemaphoreRenewRequest,
    SemaphoreReleaseRequest,
    SemaphoreReleaseResponse,
    SemaphoreLimitRequest,
    SemaphoreLimitResponse,
    PermitResponse,
    SemaphoreView,
    SemaphoreListResponse,
    CreateUserRequest,
    TokenCreated,
    UserView,
    UserList,
    CreateRoleRequest,
    GrantView,
    RoleView,
    RoleList,
    AssignRoleRequest,
    Removed,
    WhoAmI,
    ErrorBody
)))]
struct Schemas;

/// The whole document.
pub fn document() -> OpenApi {
    let mut paths = PathsBuilder::new();
    for o in OPERATIONS {
        paths = paths.path(o.1, PathItem::new(o.0.clone(), operation(o)));
    }
    // The request and response schemas, and those they refer to.
    let mut components = Schemas::openapi().components.unwrap_or_default();
    for (kind, meaning) in SECURITY_SCHEMES {
        let scheme = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).description(Some(meaning)).build();
        components.security_schemes.insert(kind.scheme().into(), SecurityScheme::Http(scheme));
    }
    let users = "A user's token (`POST /v1/auth/users`): opens the client API with the permissions its roles grant on \
                 name prefixes (403 `permission_denied` naming the `permission` and `name` otherwise), and the admin \
                 API with `admin` on every name";
    let scheme = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).description(Some(users)).build();
    components.security_schemes.insert(USER_TOKEN.into(), SecurityScheme::Http(scheme));
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("leasehold")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(env!("CARGO_PKG_DESCRIPTION")))
                .build(),
        )
        .paths(paths.build())
        .components(Some(components))
        .build()
}

/// The document as JSON, with the rules between two fields of a request
/// that the Rust types cannot state added to its schema as JSON Schema
/// `not`s, so that a request the schema calls valid is one the server takes:
/// a lease has a `ttl_ms` or a `session`, one of them, not both; a lock's renew or release
/// names an `owner` in mode `shared` only, and must in that mode; a shared
/// acquire takes no lock delay; a `seq` is counted within a `session`. (Each
/// acquire, of a lock, locks, a campaign or permits, has the ttl rules.)
pub fn document_json() -> serde_json::Value {
    let mut doc = serde_json::to_value(document()).expect("the document serializes");
    let both = |a: &str, a_schema: serde_json::Value, b: &str, b_schema: serde_json::Value| serde_json::json!({ "not": { "required": [a, b], "properties": { a: a_schema, b: b_schema } } });
    let integer = || serde_json::json!({ "type": "integer" });
    let ttl_and_session = || both("ttl_ms", integer(), "session", integer());
    let ttl_or_session = || {
        let given = |field: &str| serde_json::json!({ "required": [field], "properties": { field: integer() } });
        serde_json::json!({ "anyOf": [given("ttl_ms"), given("session")] })
    };
    // Without `mode` the `mode` property holds vacuously: an owner alone is refused too.
    let owner_unshared = serde_json::json!({ "not": {
        "required": ["owner"],
        "properties": { "owner": { "type": "string" }, "mode": { "not": { "const": "shared" } } },
    } });
    // `if` this field is an integer, `then` that one must be one too.
    let needs = |field: &str, kind: &str, then: &str, then_kind: serde_json::Value| {
        serde_json::json!({
            "if": { "required": [field], "properties": { field: { "type": kind } } },
            "then": { "required": [then], "properties": { then: then_kind } },
        })
    };
    let seq_needs_session = || needs("seq", "integer", "session", integer());
    let shared_needs_owner = serde_json::json!({
        "if": { "required": ["mode"], "properties": { "mode": { "const": "shared" } } },
        "then": { "required": ["owner"], "properties": { "owner": { "type": "string" } } },
    });
    let shared_delay = both("mode", serde_json::json!({ "const": "shared" }), "lock_delay_ms", integer());
    let rules = [
        ("AcquireRequest", vec![ttl_or_session(), ttl_and_session(), shared_delay, seq_needs_session()]),
        ("SemaphoreAcquireRequest", vec![ttl_or_session(), ttl_and_session(), seq_needs_session()]),
        ("MultiAcquireRequest", vec![ttl_or_session(), ttl_and_session(), seq_needs_session()]),
        ("CampaignRequest", vec![ttl_or_session(), ttl_and_session(), seq_needs_session()]),
        ("RenewRequest", vec![owner_unshared.clone(), shared_needs_owner.clone()]),
        ("ReleaseRequest", vec![owner_unshared, shared_needs_owner, seq_needs_session()]),
    ];
    for (name, rules) in rules {
        doc["components"]["schemas"][name]["allOf"] = serde_json::Value::Array(rules);
    }
    doc
}

/// The document as `docs/openapi.json` holds it: pretty-printed, keys in
/// a stable order, ending in a newline.
pub fn document_text() -> String {
    let mut text = serde_json::to_string_pretty(&document_json()).expect("the document serializes");
    text.push('\n');
    text
}

fn operation(o: &Operation) -> utoipa::openapi::path::Operation {
    let Operation(_, path, tag, part, id, summary, request, ok, _) = o;
    let mut builder = OperationBuilder::new().tag(*tag).operation_id(Some(*id)).summary(Some(*summary));
    // Alternatives: any one of the part's schemes opens it.
    for kind in part.map_or(&[][..], |p| p.openers()) {
        builder = builder.security(SecurityRequirement::new(kind.scheme(), Vec::<String>::new()));
    }
    if matches!(part, Some(Client | Admin | Observe)) {
        builder = builder.security(SecurityRequirement::new(USER_TOKEN, Vec::<String>::new()));
    }
    for name in path_parameters(path) {
        let schema = match name {
            "id" if path.starts_with("/v1/sessions") => schema::session_id(),
            "id" if path.starts_with("/v1/auth") => schema::uint(1, u64::MAX, false, "A token's id."),
            "name" | "role" if path.starts_with("/v1/auth") => schema::principal_name(),
            "id" => schema::uint(0, u64::MAX, false, "A member's node id."),
            "name" if path.starts_with("/v1/semaphores") => {
                schema::text(Limits::DEFAULT.max_name_bytes, false, "A semaphore name.")
            }
            "name" => schema::lock_name(),
            "key" => schema::text(Limits::DEFAULT.max_name_bytes, false, "A record key."),
            _ => schema::text(Limits::DEFAULT.max_name_bytes, false, "A gate's resource name."),
        };
        let parameter = ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Path)
            .required(Required::True)
            .schema(Some(schema));
        builder = builder.parameter(parameter);
    }
    if *path == "/v1/events" {
        builder = builder.parameters(Some(EventsQuery::into_params(|| Some(ParameterIn::Query))));
    } else if path.ends_with("/events") || path.ends_with("/observe") {
        builder = builder.parameters(Some(ResumeQuery::into_params(|| Some(ParameterIn::Query))));
    }
    if *path == "/v1/locks" || *path == "/v1/semaphores" || (*path == "/v1/elections" && matches!(o.0, Get)) {
        builder = builder.parameters(Some(ListQuery::into_params(|| Some(ParameterIn::Query))));
    }
    if *path == "/v1/cluster/status" {
        builder = builder.parameters(Some(StatusQuery::into_params(|| Some(ParameterIn::Query))));
    }
    if *path == "/v1/sessions" && matches!(o.0, Get) {
        builder = builder.parameters(Some(SessionListQuery::into_params(|| Some(ParameterIn::Query))));
    }
    if *path == "/v1/sessions/{id}" && matches!(o.0, Delete) {
        builder = builder.parameters(Some(DeleteSessionQuery::into_params(|| Some(ParameterIn::Query))));
    }
    if let Some(content) = content(*request) {
        builder = builder.request_body(Some(
            RequestBodyBuilder::new().content(content.0, content.1).required(Some(Required::True)).build(),
        ));
    }
    let mut success = ResponseBuilder::new().description("success");
    if let Some((media, body)) = content(ok.1) {
        success = success.content(media, body);
    }
    if forwarded(o) {
        success = success.header(LEADER_HEADER, header("integer", "The id of the leader that answered")).header(
            LEADER_ADDR_HEADER,
            header("string", "The `host:port` of that leader, so a client can go there directly"),
        );
    }
    let mut responses = ResponsesBuilder::new().response(ok.0.to_string(), success.build());
    for (status, codes) in error_statuses(o) {
        let codes = codes.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ");
        let mut error = ResponseBuilder::new()
            .description(format!("{} (codes: {codes})", error_meaning(status)))
            .content("application/json", Content::new(Some(Ref::from_schema_name("Error"))));
        if status == 503 {
            error = error.header("retry-after", header("integer", "Seconds to wait before retrying"));
        }
        if status == 401 {
            error = error.header("www-authenticate", header("string", "`Bearer realm=\"leasehold\"`"));
        }
        responses = responses.response(status.to_string(), error.build());
    }
    builder.responses(responses.build()).build()
}

/// A response header that is always sent, of JSON Schema type `kind`.
fn header(kind: &str, description: &str) -> Header {
    let schema = if kind == "integer" { Object::with_type(Type::Integer) } else { Object::with_type(Type::String) };
    HeaderBuilder::new().schema(schema).description(Some(description)).build()
}

/// The statuses `o` can be refused with, each with the error codes it may
/// carry: its handler's, and those of the layers in front of it (see
/// [`super::router`]): a plain request to an https-only node (400
/// `tls_required`), the JSON body extractor (400, 413, 415), a token check
/// (401, 403) where its part asks for one, the request deadline (408) on
/// every route, the leader forwarding (503, and 413 for the body it relays)
/// and the in-flight bound (503 `overloaded`) on all but Raft RPC.
fn error_statuses(o: &Operation) -> BTreeMap<u16, BTreeSet<&'static str>> {
    let Operation(_, path, _, part, _, _, request, _, handler) = o;
    let mut statuses: BTreeMap<u16, BTreeSet<&'static str>> = BTreeMap::new();
    let mut add = |status: u16, codes: &'static str| {
        statuses.entry(status).or_default().extend(codes.split(", "));
    };
    for (status, codes) in handler.iter() {
        add(*status, codes);
    }
    add(400, "tls_required");
    if path_parameters(path).next().is_some() {
        add(400, "invalid_argument");
    }
    if matches!(request, Named(_) | AnyJson) {
        add(400, "invalid_argument");
        add(413, "body_too_large");
        add(415, "unsupported_media_type");
    }
    add(408, "request_timeout");
    if part.is_some() {
        add(401, "unauthenticated");
        add(403, "permission_denied");
    }
    if forwarded(o) {
        add(413, "body_too_large");
        add(503, "unavailable, not_leader");
    }
    if *part != Some(Raft) {
        add(503, "overloaded");
    }
    statuses
}
/// The security schemes: one per secret, each a bearer token.
const SECURITY_SCHEMES: [(SecretKind, &str); 3] = [
    (SecretKind::ClientToken, "The client token. Asked for once the node has any secret (a client token, the admin token or the cluster secret)"),
    (SecretKind::AdminToken, "The admin token, the only one that opens init, membership, snapshots, backups and digests (and it opens the client API too). Asked for once the node has any secret; a node with secrets but no admin token refuses these to all (403)"),
    (SecretKind::ClusterSecret, "The cluster secret the members share. Asked for on Raft RPC when the node has one"),
];

/// The security scheme of users' tokens.
const USER_TOKEN: &str = "user_token";

/// The `{name}` segments of `path`.
fn path_parameters(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
}

fn content(body: Body) -> Option<(&'static str, Content)> {
    match body {
        Named(name) => Some(("application/json", Content::new(Some(Ref::from_schema_name(name))))),
        AnyJson => Some(("application/json", Content::new(Some(Object::new())))),
        Text(media) => Some((media, Content::new(Some(Object::with_type(Type::String))))),
        Body::None => None,
    }
}

fn error_meaning(status: u16) -> &'static str {
    match status {
        400 => "invalid input, named by `field` where it is one; nothing changed",
        404 => "not found",
        401 => "no bearer token, where this part of the API asks for one (with WWW-Authenticate)",
        403 => "a token that does not open this part of the API, or a part the node keeps closed (the admin API on a node with secrets but no admin token), or a user without the `permission` on a `name` the request touches; nothing changed",
        408 => "not received and answered within the request deadline; a write may still take effect",
        409 => "conflict; nothing changed",
        410 => "the node's event history no longer reaches the id asked to resume after (`compacted_before`): re-read the state, then resume after the index of that read",
        413 => "the request body is larger than 64 KiB",
        415 => "the request body is not declared `application/json`",
        500 => "internal error",
        507 => "a quota is used up: `what` names it (`leases`, `waiters`, `sessions`, `records` or `gates`) and `limit` its size; renewals, releases and expiry still work",
        503 => "no leader or no quorum now, or too many connections, requests in flight, waiting requests or event streams (`overloaded`); retry after `Retry-After` seconds",
        _ => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures every operation has its own operationId and every JSON body a
    // named schema, but for the few of no fixed shape.
    #[test]
    fn every_operation_is_named_and_typed() {
        let untyped = ["openapi", "downloadSnapshot", "raftAppend", "raftVote", "raftSnapshot"];
        let ids: BTreeSet<&str> = OPERATIONS.iter().map(|o| o.4).collect();
        assert_eq!(ids.len(), OPERATIONS.len(), "operationIds are unique");
        for o in OPERATIONS.iter().filter(|o| !untyped.contains(&o.4)) {
            assert!(!matches!(o.6, AnyJson) && !matches!(o.7 .1, AnyJson), "{}: a body without a schema", o.4);
        }
        let doc = document_json();
        for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
            assert!(schema.as_object().is_some_and(|s| !s.is_empty()), "schema {name} is {{}}");
        }
    }
}
