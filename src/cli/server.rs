//! Operator commands: run a node or a local cluster, change membership, back
//! up and restore, show status, administer users and roles.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use leasehold::admission;
use leasehold::api::{self, ApiConfig, RequestLimits};
use leasehold::node::{self, InitialClusterState, NodeConfig, PeerTransport};
use leasehold::raft::Member;
use leasehold::security::{Secrets, SecurityFiles};
use leasehold::server::{self, ConnectionLimits, ServeConfig};
use leasehold_core::Quotas;
use leasehold_local::{LocalCluster, NodeLogs, NodeSecurity};
use leasehold_proto::auth::Permission;
use leasehold_proto::cluster::{MembershipResponse, NewMember};

use super::logging::LogFormat;
use super::output::OutputArg;
use super::{duration, exit};
use super::{stop_signal, this_binary, Target};

#[derive(Subcommand)]
pub enum ServerCmd {
    /// Run one node.
    // Boxed: by far the largest variant (every serve setting).
    Serve(Box<ServeArgs>),
    /// Run a local cluster on 127.0.0.1 (node i on port-base + i, its peer port
    /// port-base + 100 + i) until Ctrl-C.
    Up(UpArgs),
    /// Cluster membership: list, add (as learner), promote, remove.
    #[command(after_long_help = exit::TABLE)]
    Member {
        #[command(flatten)]
        target: Target,
        #[command(subcommand)]
        action: MemberAction,
    },
    /// Back up a node: it takes a snapshot now, written to --out (the first of --endpoints).
    #[command(after_long_help = exit::TABLE)]
    Backup {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        out: PathBuf,
    },
    /// Seed the empty data folder of a node of a NEW cluster from a backup.
    /// Run it for every node with the same file and --peers, then start the
    /// nodes (without --peers). See cluster/README.md.
    #[command(after_long_help = exit::TABLE)]
    Restore {
        /// A file written by `leasehold backup`.
        #[arg(long)]
        from: PathBuf,
        /// The new node's data folder (must be empty or absent).
        #[arg(long)]
        data: PathBuf,
        /// The new cluster's voters, `id=host:port,...` (`id=host:port@peer-host:port`
        /// for a node with its own peer port), as `serve --peers`.
        #[arg(long, value_delimiter = ',', required = true)]
        peers: Vec<String>,
        /// Continue log indexes (fencing tokens) above this, e.g. the highest
        /// token any resource has seen, when the backup may miss grants.
        #[arg(long, default_value_t = 0)]
        min_index: u64,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Show every endpoint's view of the cluster.
    #[command(after_long_help = exit::TABLE)]
    Status {
        #[command(flatten)]
        target: Target,
    },
    /// Users and their tokens (admin): add, remove, list, token add|revoke.
    #[command(after_long_help = exit::TABLE)]
    User {
        #[command(flatten)]
        target: Target,
        #[command(subcommand)]
        action: UserAction,
    },
    /// Roles and the permissions they grant on name prefixes (admin): add,
    /// remove, grant, revoke, list, assign, unassign.
    #[command(after_long_help = exit::TABLE)]
    Role {
        #[command(flatten)]
        target: Target,
        #[command(subcommand)]
        action: RoleAction,
    },
}

#[derive(Subcommand)]
pub enum UserAction {
    /// Add a user; prints its first token, shown this once (the cluster keeps only its hash).
    Add {
        name: String,
        /// Roles to give it (each must exist), comma-separated.
        #[arg(long, value_delimiter = ',')]
        role: Vec<String>,
    },
    /// Remove a user: its tokens open nothing from then on, on every node.
    Remove { name: String },
    /// Users with their roles and token ids.
    List,
    /// A user's tokens: `add` prints a new one (shown once), `revoke ID` ends one.
    Token {
        #[command(subcommand)]
        action: TokenAction,
    },
}

#[derive(Subcommand)]
pub enum TokenAction {
    /// Add a token to the user (to rotate without a gap); prints it this once.
    Add { user: String },
    /// Revoke the user's token with this id (see `user list`).
    Revoke { user: String, id: u64 },
}

#[derive(Subcommand)]
pub enum RoleAction {
    /// Add a role, granting nothing yet.
    Add { name: String },
    /// Remove a role, and take it from every user.
    Remove { name: String },
    /// Grant PERMISSION (read, lock, fence, admin) on the names that start with PREFIX ("" = every name).
    Grant {
        name: String,
        permission: String,
        #[arg(default_value = "")]
        prefix: String,
    },
    /// Take the grant of PERMISSION on exactly PREFIX from the role.
    Revoke {
        name: String,
        permission: String,
        #[arg(default_value = "")]
        prefix: String,
    },
    /// Roles with their grants.
    List,
    /// Give USER the role NAME.
    Assign { name: String, user: String },
    /// Take the role NAME from USER.
    Unassign { name: String, user: String },
}

/// A permission named on the command line.
fn permission(text: &str) -> Result<Permission> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| anyhow::anyhow!("{text:?} is not a permission: read, lock, fence or admin"))
}

#[derive(Subcommand)]
pub enum MemberAction {
    /// Members with their roles, as the answering node sees them.
    List,
    /// Add a node as a learner; returns once it has caught up.
    Add {
        id: u64,
        /// Its client address, host:port.
        addr: String,
        /// Its own peer port's address (`serve --peer-addr`), host:port.
        #[arg(long)]
        peer_addr: Option<String>,
    },
    /// Make a learner a voter (refused if a quorum of the new voters is not reachable).
    Promote { id: u64 },
    /// Remove a voter or learner (refused if the remaining voters could not form a quorum).
    Remove { id: u64 },
}

#[derive(Args)]
pub struct ServeArgs {
    /// TOML file of these settings, keyed by their variable's name without
    /// `LEASEHOLD_` in lower case (`tick_ms = 100`); flags and environment
    /// variables override it. See docs/configuration.md.
    #[arg(long, env = "LEASEHOLD_CONFIG")]
    config: Option<PathBuf>,
    /// This node's id (a positive integer, unique in the cluster).
    #[arg(long, env = "LEASEHOLD_ID")]
    id: u64,
    /// host:port that clients (and, without --peer-addr, the other members) use to reach this node.
    #[arg(long, env = "LEASEHOLD_ADDR")]
    addr: String,
    /// Address to bind (defaults to --addr).
    #[arg(long, env = "LEASEHOLD_LISTEN")]
    listen: Option<SocketAddr>,
    /// host:port of this node's own peer port, which the other members use
    /// for Raft and forwarding (recommended; firewall it to the members).
    /// With it, the --addr port takes no peer connections.
    #[arg(long, env = "LEASEHOLD_PEER_ADDR")]
    peer_addr: Option<String>,
    /// Address to bind the peer port to (defaults to --peer-addr).
    #[arg(long, env = "LEASEHOLD_PEER_LISTEN", requires = "peer_addr")]
    peer_listen: Option<SocketAddr>,
    /// Data folder (Raft log, snapshots).
    #[arg(long, env = "LEASEHOLD_DATA")]
    data: PathBuf,
    /// Leader tick period, 10ms to 10s (--tick-ms, $LEASEHOLD_TICK_MS: a bare number is milliseconds).
    #[arg(long, alias = "tick-ms", env = "LEASEHOLD_TICK_MS", default_value = "100ms", value_parser = tick_parser())]
    tick: Duration,
    /// Initial cluster, `id=host:port,...`, each member's client address;
    /// `id=host:port@peer-host:port` for a member with its own peer port
    /// (--peer-addr). With --initial-cluster-state new, the node with the
    /// lowest id initializes the cluster on its first start.
    #[arg(long, env = "LEASEHOLD_PEERS", value_delimiter = ',')]
    peers: Vec<String>,
    /// `new` only on the first start of a new cluster (the lowest id of
    /// --peers initializes it, unless another peer already has a cluster);
    /// `existing` (the default) never initializes.
    #[arg(long, env = "LEASEHOLD_INITIAL_CLUSTER_STATE", value_enum, default_value_t = ClusterState::Existing,
          requires = "peers")]
    initial_cluster_state: ClusterState,
    /// Log entries between snapshots (the log is purged behind each one).
    #[arg(long, env = "LEASEHOLD_SNAPSHOT_EVERY", default_value_t = node::DEFAULT_SNAPSHOT_EVERY,
          value_parser = clap::value_parser!(u64).range(100..))]
    snapshot_every: u64,
    #[command(flatten)]
    security: SecurityArgs,
    /// Time a client has to send a request head; also closes idle connections
    /// (--header-read-timeout-ms and its variable: a bare number is milliseconds).
    #[arg(long, alias = "header-read-timeout-ms", env = "LEASEHOLD_HEADER_READ_TIMEOUT_MS",
          default_value = "10s", value_parser = timeout_parser())]
    header_read_timeout: Duration,
    /// Time to receive a request and answer it (an acquire's wait and event streams excepted)
    /// (--request-timeout-ms and its variable: a bare number is milliseconds).
    #[arg(long, alias = "request-timeout-ms", env = "LEASEHOLD_REQUEST_TIMEOUT_MS",
          default_value = "30s", value_parser = timeout_parser())]
    request_timeout: Duration,
    /// Client connections open at once; more are answered 503 overloaded
    /// with Retry-After and closed [default: the open-files limit less 512,
    /// at most 65536]. Members' connections are not counted.
    #[arg(long, env = "LEASEHOLD_MAX_CONNECTIONS",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_connections: Option<usize>,
    /// Connections one client address may hold at once [default: a quarter
    /// of --max-connections].
    #[arg(long, env = "LEASEHOLD_MAX_CONNECTIONS_PER_CLIENT",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_connections_per_client: Option<usize>,
    /// Requests waiting at once (acquires with wait_ms, relayed requests);
    /// more are answered 503 overloaded [default: 4 × --max-connections].
    #[arg(long, env = "LEASEHOLD_MAX_WAITING",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_waiting: Option<usize>,
    /// Requests one client address may have waiting at once [default: a
    /// quarter of --max-waiting].
    #[arg(long, env = "LEASEHOLD_MAX_WAITING_PER_CLIENT",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_waiting_per_client: Option<usize>,
    /// Live leases in the cluster while this node leads; a new grant past it
    /// is answered 507 full (renewals, releases and expiry always work).
    /// About 450 bytes of RSS each on every node: give every node the same.
    #[arg(long, env = "LEASEHOLD_MAX_LEASES", default_value_t = node::DEFAULT_QUOTAS.max_leases,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_leases: u64,
    /// Places in lock queues in the cluster while this node leads (a wait
    /// for n locks takes n); a new wait past it is answered 507 full.
    #[arg(long, env = "LEASEHOLD_MAX_WAITERS", default_value_t = node::DEFAULT_QUOTAS.max_waiters,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_waiters: u64,
    /// Event streams (SSE) open at once on this node; more are answered 503
    /// overloaded with Retry-After.
    #[arg(long, env = "LEASEHOLD_MAX_SUBSCRIBERS", default_value_t = admission::DEFAULT_MAX_SUBSCRIBERS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_subscribers: usize,
    /// Recent events this node keeps, so an event stream can resume after
    /// the id it got last, here or on another node; a resume from further
    /// back is answered 410 compacted. A few hundred bytes each.
    #[arg(long, env = "LEASEHOLD_EVENT_HISTORY", default_value_t = leasehold::store::DEFAULT_EVENT_HISTORY,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    event_history: usize,
    /// Event streams one client address may have open at once [default: a
    /// quarter of --max-subscribers].
    #[arg(long, env = "LEASEHOLD_MAX_SUBSCRIBERS_PER_CLIENT",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_subscribers_per_client: Option<usize>,
    /// Threads that run this node's requests and its Raft core (the log
    /// writer and disk work have threads of their own) [default: the CPUs
    /// available]. 1 runs them all on one thread: with three nodes sharing
    /// two cores that did 11 % more lock cycles for 10 % less server CPU
    /// than two (docs/performance.md), and `leasehold up` gives each node
    /// its share of the CPUs this way.
    #[arg(long, env = "LEASEHOLD_WORKER_THREADS",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    worker_threads: Option<usize>,
    /// Client and admin requests served at once; more are answered 503 overloaded.
    #[arg(long, env = "LEASEHOLD_MAX_IN_FLIGHT", default_value_t = api::DEFAULT_MAX_IN_FLIGHT,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_in_flight: usize,
    /// Serve with no client token, admin token or cluster secret on an
    /// address outside loopback, where anyone who reaches it can take any
    /// lock, change membership and act as a member; refused without this.
    #[arg(long, env = "LEASEHOLD_INSECURE")]
    insecure: bool,
}

/// `--initial-cluster-state`, as etcd spells it.
#[derive(Clone, Copy, clap::ValueEnum)]
enum ClusterState {
    New,
    Existing,
}

/// `--tick`: the node's tick must be whole milliseconds, 10 ms to 10 s.
fn tick_parser() -> impl Fn(&str) -> Result<Duration, duration::DurationError> + Clone + Send + Sync + 'static {
    duration::or_bare(Duration::from_millis, Duration::from_millis(10)..=Duration::from_secs(10))
}

/// `--header-read-timeout`, `--request-timeout`: 100 ms to an hour.
fn timeout_parser() -> impl Fn(&str) -> Result<Duration, duration::DurationError> + Clone + Send + Sync + 'static {
    duration::or_bare(Duration::from_millis, Duration::from_millis(100)..=Duration::from_secs(3600))
}

#[derive(Args)]
pub struct UpArgs {
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=7))]
    nodes: u16,
    #[arg(long, default_value = "./data")]
    data: PathBuf,
    #[arg(long, default_value_t = 7700)]
    port_base: u16,
    /// Leader tick period of every node, as `serve --tick`.
    #[arg(long, alias = "tick-ms", default_value = "100ms", value_parser = tick_parser())]
    tick: Duration,
    #[command(flatten)]
    security: SecurityArgs,
}

/// Where a node's secrets and TLS files are (`serve` and `up`).
#[derive(Debug, Clone, Default, Args)]
pub struct SecurityArgs {
    /// File holding the client API bearer token (or set $LEASEHOLD_CLIENT_TOKEN).
    #[arg(long, env = "LEASEHOLD_CLIENT_TOKEN_FILE")]
    client_token_file: Option<PathBuf>,
    /// File holding the admin bearer token for init, membership, snapshots, backups and digests (or set
    /// $LEASEHOLD_ADMIN_TOKEN).
    #[arg(long, env = "LEASEHOLD_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
    /// File holding the secret every member sends on Raft RPC (or set $LEASEHOLD_CLUSTER_SECRET).
    #[arg(long, env = "LEASEHOLD_CLUSTER_SECRET_FILE")]
    cluster_secret_file: Option<PathBuf>,
    /// TLS certificate chain (PEM). With --tls-key-file, the node serves https only.
    #[arg(long, env = "LEASEHOLD_TLS_CERT_FILE", requires = "tls_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// TLS private key (PEM) of --tls-cert-file.
    #[arg(long, env = "LEASEHOLD_TLS_KEY_FILE", requires = "tls_cert_file")]
    tls_key_file: Option<PathBuf>,
    /// CA certificate (PEM) the other nodes' certificates chain to.
    #[arg(long, env = "LEASEHOLD_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// Client certificates (as etcd's --client-cert-auth --trusted-ca-file): the client listener asks each
    /// connection for a certificate chaining to this CA (PEM); one that does not is refused in the handshake,
    /// none is allowed. Without a bearer token, the certificate's subject Common Name is the user. Needs
    /// --tls-cert-file.
    #[arg(long, env = "LEASEHOLD_CLIENT_TRUSTED_CA", requires = "tls_cert_file")]
    client_trusted_ca: Option<PathBuf>,
    /// Mutual TLS between members: this node's peer certificate chain (PEM), served on the peer port and
    /// presented when dialing the others. Needs --peer-addr, --peer-key and --peer-trusted-ca.
    #[arg(long, env = "LEASEHOLD_PEER_CERT", requires_all = ["peer_key", "peer_trusted_ca"])]
    peer_cert: Option<PathBuf>,
    /// Private key (PEM) of --peer-cert.
    #[arg(long, env = "LEASEHOLD_PEER_KEY", requires = "peer_cert")]
    peer_key: Option<PathBuf>,
    /// CA certificate (PEM) every member's --peer-cert chains to: peer connections are taken only from
    /// certificates it signed.
    #[arg(long, env = "LEASEHOLD_PEER_TRUSTED_CA", requires = "peer_cert")]
    peer_trusted_ca: Option<PathBuf>,
}

impl SecurityArgs {
    /// For a node of this process.
    fn files(&self) -> SecurityFiles {
        SecurityFiles {
            client_token_file: self.client_token_file.clone(),
            admin_token_file: self.admin_token_file.clone(),
            cluster_secret_file: self.cluster_secret_file.clone(),
            tls_cert_file: self.tls_cert_file.clone(),
            tls_key_file: self.tls_key_file.clone(),
            ca_file: self.ca_file.clone(),
            client_trusted_ca_file: self.client_trusted_ca.clone(),
            peer_cert_file: self.peer_cert.clone(),
            peer_key_file: self.peer_key.clone(),
            peer_trusted_ca_file: self.peer_trusted_ca.clone(),
        }
    }

    /// For the node processes `up` starts.
    fn node_security(&self) -> NodeSecurity {
        NodeSecurity {
            client_token_file: self.client_token_file.clone(),
            admin_token_file: self.admin_token_file.clone(),
            cluster_secret_file: self.cluster_secret_file.clone(),
            tls_cert_file: self.tls_cert_file.clone(),
            tls_key_file: self.tls_key_file.clone(),
            ca_file: self.ca_file.clone(),
            client_trusted_ca: self.client_trusted_ca.clone(),
            peer_cert: self.peer_cert.clone(),
            peer_key: self.peer_key.clone(),
            peer_trusted_ca: self.peer_trusted_ca.clone(),
        }
    }
}

impl ServerCmd {
    /// `serve` and `up`, the commands that run nodes.
    pub fn is_server(&self) -> bool {
        matches!(self, ServerCmd::Serve(_) | ServerCmd::Up(_))
    }

    /// `serve --worker-threads`: the runtime's threads, when given.
    pub fn worker_threads(&self) -> Option<usize> {
        match self {
            ServerCmd::Serve(args) => args.worker_threads,
            _ => None,
        }
    }

    pub async fn run(self, log_format: LogFormat) -> Result<()> {
        match self {
            ServerCmd::Serve(args) => serve(*args).await,
            ServerCmd::Up(args) => up(args, log_format).await,
            ServerCmd::Member { target, action } => {
                let client = target.client()?;
                let log_index = match action {
                    MemberAction::List => return target.output.print(&client.status().await?.members),
                    MemberAction::Add { id, addr, peer_addr } => {
                        client.add_member(&NewMember { id, addr, peer_addr }).await?
                    }
                    MemberAction::Promote { id } => client.promote(id).await?,
                    MemberAction::Remove { id } => client.remove_member(id).await?,
                };
                target.output.print(&MembershipResponse { log_index, members: client.status().await?.members })
            }
            ServerCmd::User { target, action } => {
                let client = target.client()?;
                match action {
                    UserAction::Add { name, role } => {
                        // Checked first, so a missing role leaves no user behind.
                        let roles = client.list_roles().await?;
                        if let Some(missing) = role.iter().find(|r| !roles.iter().any(|known| &known.name == *r)) {
                            anyhow::bail!("no role {missing:?}: add it first with `leasehold role add {missing}`");
                        }
                        let created = client.create_user(&name).await?;
                        for role in role {
                            client.assign_role(&name, &role).await?;
                        }
                        target.output.print(&created)
                    }
                    UserAction::Remove { name } => target.output.print(&client.remove_user(&name).await?),
                    UserAction::List => target.output.print(&client.list_users().await?),
                    UserAction::Token { action: TokenAction::Add { user } } => {
                        target.output.print(&client.add_token(&user).await?)
                    }
                    UserAction::Token { action: TokenAction::Revoke { user, id } } => {
                        target.output.print(&client.revoke_token(&user, id).await?)
                    }
                }
            }
            ServerCmd::Role { target, action } => {
                let client = target.client()?;
                match action {
                    RoleAction::Add { name } => target.output.print(&client.create_role(&name).await?),
                    RoleAction::Remove { name } => target.output.print(&client.remove_role(&name).await?),
                    RoleAction::Grant { name, permission: p, prefix } => {
                        target.output.print(&client.grant(&name, permission(&p)?, &prefix).await?)
                    }
                    RoleAction::Revoke { name, permission: p, prefix } => {
                        target.output.print(&client.revoke(&name, permission(&p)?, &prefix).await?)
                    }
                    RoleAction::List => target.output.print(&client.list_roles().await?),
                    RoleAction::Assign { name, user } => target.output.print(&client.assign_role(&user, &name).await?),
                    RoleAction::Unassign { name, user } => {
                        target.output.print(&client.unassign_role(&user, &name).await?)
                    }
                }
            }
            ServerCmd::Backup { target, out } => {
                let (taken, backup) = target.client()?.backup_of(0).await?;
                std::fs::write(&out, &backup).with_context(|| format!("writing {}", out.display()))?;
                target.output.print(&serde_json::json!({
                    "node": target.cluster.endpoints[0], "file": out, "bytes": backup.len(), "snapshot": taken
                }))
            }
            ServerCmd::Restore { from, data, peers, min_index, output } => {
                let backup = std::fs::read(&from).with_context(|| format!("reading {}", from.display()))?;
                let last = leasehold::store::restore(&data, &backup, &parse_peers(&peers)?, min_index).await?;
                output.print(&serde_json::json!({
                    "data": data, "continues_after_index": last.index, "term": last.leader_id.term
                }))
            }
            ServerCmd::Status { target } => {
                let client = target.client()?;
                let mut statuses = Vec::new();
                let (mut answered, mut failure) = (0, None);
                for (i, endpoint) in target.cluster.endpoints.iter().enumerate() {
                    statuses.push(match client.status_of(i).await {
                        Ok(s) => {
                            answered += 1;
                            serde_json::to_value(s)?
                        }
                        Err(e) => {
                            let shown = serde_json::json!({ "endpoint": endpoint, "error": e.to_string() });
                            failure = Some(e);
                            shown
                        }
                    });
                }
                target.output.print(&statuses)?;
                // No endpoint answered: the status of the last failure (unreachable, refused, ...).
                match failure {
                    Some(e) if answered == 0 => Err(e.into()),
                    _ => Ok(()),
                }
            }
        }
    }
}

/// `--peers`: `id=host:port`, or `id=host:port@peer-host:port` for a
/// member with its own peer port. (`@` appears in no `host:port`, IPv6
/// ones included, and `,` already separates members.)
fn parse_peers(peers: &[String]) -> Result<BTreeMap<u64, Member>> {
    let mut members = BTreeMap::new();
    for peer in peers {
        let (id, addrs) = peer.split_once('=').with_context(|| format!("peer {peer:?} is not id=host:port"))?;
        let member = match addrs.split_once('@') {
            Some((addr, peer_addr)) => Member { addr: addr.to_owned(), peer_addr: Some(peer_addr.to_owned()) },
            None => Member { addr: addrs.to_owned(), peer_addr: None },
        };
        if member.addr.is_empty() || member.peer_addr.as_ref().is_some_and(|p| p.is_empty()) {
            bail!("peer {peer:?} is not id=host:port or id=host:port@peer-host:port");
        }
        members.insert(id.parse().with_context(|| format!("peer id {id:?}"))?, member);
    }
    Ok(members)
}

async fn serve(args: ServeArgs) -> Result<()> {
    if let Some(file) = &args.config {
        // Read by `config::apply` before the command line was parsed.
        tracing::info!(file = %file.display(), "settings from the configuration file, unless a flag or variable sets them");
    }
    let listen = match args.listen {
        Some(l) => l,
        None => args.addr.parse().with_context(|| format!("--addr {} is not ip:port; give --listen", args.addr))?,
    };
    let peer_listen = match (&args.peer_addr, args.peer_listen) {
        (_, Some(l)) => Some(l),
        (Some(peer_addr), None) => Some(
            peer_addr.parse().with_context(|| format!("--peer-addr {peer_addr} is not ip:port; give --peer-listen"))?,
        ),
        (None, None) => None,
    };
    let initial_members = parse_peers(&args.peers)?;
    match initial_members.get(&args.id) {
        None if !initial_members.is_empty() => bail!("--peers does not list this node's id {}", args.id),
        // The others dial what --peers says: it must be where this node listens.
        Some(me) if me.peer_addr != args.peer_addr => bail!(
            "--peers gives node {} the peer address {:?}, but --peer-addr is {:?}",
            args.id,
            me.peer_addr,
            args.peer_addr
        ),
        _ => {}
    }
    let files = args.security.files();
    let secrets = files.secrets()?;
    let listeners = Listeners { client: listen, peer: peer_listen };
    refuse_open_outside_loopback(&listeners, &secrets, files.has_peer_certificates(), args.insecure)?;
    for warning in secrets.exposure() {
        tracing::warn!("{warning}");
    }
    let peer_certificates = files.peer_certificates()?;
    if peer_certificates.is_some() && args.peer_addr.is_none() {
        bail!("--peer-cert needs --peer-addr: mutual TLS between members is served on their own port");
    }
    if files.tls() && files.ca_file.is_none() && peer_certificates.is_none() {
        if args.peer_addr.is_some() {
            // Without a CA to check the members' certificates against, Raft
            // goes over https to the client port, and the peer port is unused.
            bail!("--peer-addr under TLS needs --ca-file");
        }
        tracing::warn!("TLS without --ca-file: the other nodes' certificates must chain to a built-in root");
    }
    let node = NodeConfig {
        id: args.id,
        advertise: args.addr,
        peer_advertise: args.peer_addr,
        data_dir: args.data,
        tick_ms: duration::millis(args.tick),
        initial_members,
        initial_cluster_state: match args.initial_cluster_state {
            ClusterState::New => InitialClusterState::New,
            ClusterState::Existing => InitialClusterState::Existing,
        },
        snapshot_every: args.snapshot_every,
        quotas: Quotas { max_leases: args.max_leases, max_waiters: args.max_waiters },
        event_history: args.event_history,
        peers: PeerTransport {
            tls: files.tls(),
            ca: files.ca()?,
            cluster_secret: secrets.cluster_secret.clone(),
            peer_tls: match &peer_certificates {
                Some(certificates) => Some(certificates.client.clone()),
                None => files.peer_tls()?,
            },
            status_token: secrets.for_status_probes(),
        },
    };
    // Budgets follow the open-files limit, and from each total its share.
    let fd_limit = leasehold_cli::raise_fd_limit();
    let defaults = match args.max_connections {
        Some(n) => admission::Defaults::for_connections(n),
        None => admission::Defaults::for_fd_limit(fd_limit),
    };
    let max_connections = defaults.max_connections;
    let defaults = match args.max_waiting {
        Some(n) => defaults.with_waiting(n),
        None => defaults,
    };
    let max_waiting = defaults.max_waiting;
    let defaults = defaults.with_subscribers(args.max_subscribers);
    let serve_config = ServeConfig {
        listen,
        peer_listen,
        tls: files.server_tls()?,
        peer_tls: peer_certificates.map(|certificates| certificates.server),
        connection_limits: ConnectionLimits {
            header_read_timeout: args.header_read_timeout,
            max_connections,
            max_connections_per_client: args.max_connections_per_client.unwrap_or(defaults.max_connections_per_client),
        },
        api: ApiConfig {
            secrets,
            peer_port: peer_listen.is_some(),
            request_limits: RequestLimits {
                timeout: args.request_timeout,
                max_in_flight: args.max_in_flight,
                max_waiting,
                max_waiting_per_client: args.max_waiting_per_client.unwrap_or(defaults.max_waiting_per_client),
                max_subscribers: args.max_subscribers,
                max_subscribers_per_client: args
                    .max_subscribers_per_client
                    .unwrap_or(defaults.max_subscribers_per_client),
            },
        },
    };
    server::run(node, serve_config, stop_signal()).await?;
    Ok(())
}

/// The listeners a node serves on: the client one, and the members' own
/// when it has one (`--peer-addr`). Raft RPC is served on the peer one when
/// there is one, else on the client one.
struct Listeners {
    client: SocketAddr,
    peer: Option<SocketAddr>,
}

impl Listeners {
    fn all(&self) -> impl Iterator<Item = SocketAddr> {
        std::iter::once(self.client).chain(self.peer)
    }

    fn raft(&self) -> SocketAddr {
        self.peer.unwrap_or(self.client)
    }
}

/// Refuses, unless `insecure` says so, to serve outside loopback where
/// anyone who reaches the node could own it: with no secret at all (every
/// endpoint open, CockroachDB's `--insecure`), or with tokens but neither
/// a cluster secret nor peer certificates where Raft RPC is served (anyone
/// could then vote, append entries or install a snapshot as a member). On
/// loopback only this host can reach it.
fn refuse_open_outside_loopback(
    listeners: &Listeners,
    secrets: &Secrets,
    peer_certificates: bool,
    insecure: bool,
) -> Result<()> {
    if insecure {
        return Ok(());
    }
    if !secrets.any() {
        let Some(listen) = listeners.all().find(|l| !l.ip().is_loopback()) else { return Ok(()) };
        bail!(
            "refusing to serve on {listen} (not loopback) with no client token, admin token or cluster secret: \
             anyone who reaches it could take any lock, change membership and act as a member; configure the \
             secrets (docs/operations.md, \"Secrets\") or pass --insecure to run open"
        )
    }
    let raft = listeners.raft();
    if secrets.cluster_secret.is_none() && !peer_certificates && !raft.ip().is_loopback() {
        bail!(
            "refusing to serve Raft RPC on {raft} (not loopback) with no cluster secret and no peer certificates: \
             anyone who reaches it could vote, append entries and install a snapshot as a member; configure \
             --cluster-secret-file (or --peer-cert, --peer-key and --peer-trusted-ca) on every node, or pass \
             --insecure to run it open"
        )
    }
    Ok(())
}

/// `up`: node i's peer port is this far above its client port, so the peer
/// ports of up to 7 nodes are a block apart from the client ports.
const PEER_PORT_OFFSET: u16 = 100;

async fn up(args: UpArgs, log_format: LogFormat) -> Result<()> {
    let port = |offset: u16| {
        let port = args.port_base.checked_add(offset).context("--port-base too high for the nodes' ports")?;
        Ok::<_, anyhow::Error>(SocketAddr::from(([127, 0, 0, 1], port)))
    };
    let addrs = (1..=args.nodes).map(port).collect::<Result<Vec<_>>>()?;
    let peer_addrs = (1..=args.nodes).map(|i| port(PEER_PORT_OFFSET + i)).collect::<Result<Vec<_>>>()?;
    std::fs::create_dir_all(&args.data)?;
    let mut cluster =
        LocalCluster::new(&this_binary()?, &args.data, &addrs, duration::millis(args.tick), NodeLogs::Prefixed)
            .with_peer_addrs(&peer_addrs)
            .with_serve_args(&["--log-format", log_format.as_arg()])
            .with_own_process_groups()
            .with_security(args.security.node_security())?;
    // Node 1 initializes the cluster and asks the others for votes at once:
    // start it last, when they answer, so no vote request meets a closed port.
    for id in 2..=u64::from(args.nodes) {
        cluster.start(id)?;
    }
    cluster.wait_answering(Duration::from_secs(30)).await?;
    cluster.start(1)?;
    let pids: Vec<String> = cluster.ids().iter().map(|id| format!("{id} {}", cluster.pid(*id).unwrap_or(0))).collect();
    std::fs::write(args.data.join("pids"), pids.join("\n") + "\n")?;
    let say = |line: &str| match log_format {
        LogFormat::Text => println!("leasehold: {line}"),
        LogFormat::Json => tracing::info!("{line}"),
    };
    let endpoints = cluster.endpoints().join(",");
    match cluster.wait_for_leader(Duration::from_secs(30)).await {
        Ok(leader) => {
            say(&format!("{} nodes up, leader is node {leader}, data in {}", args.nodes, args.data.display()));
            say(&format!("endpoints {endpoints}"));
            say(&format!("try  {}", try_curl(&args.security, &cluster.endpoint(1))));
        }
        Err(e) => say(&format!("{e}; nodes keep running, see their logs")),
    }
    say("Ctrl-C stops the nodes");
    stop_signal().await;
    say("stopping nodes");
    // The leader first: a follower that stopped first would fail the
    // leader's replication (logged as errors). The followers follow within
    // milliseconds, long before they would miss the leader and call an election.
    let grace = Duration::from_secs(5);
    if let Ok(leader) = cluster.wait_for_leader(Duration::from_secs(1)).await {
        cluster.stop(leader, grace);
    }
    cluster.stop_all(grace);
    Ok(())
}

/// A curl command line that acquires a lock on `endpoint`, with the CA and
/// token options the cluster needs.
fn try_curl(security: &SecurityArgs, endpoint: &str) -> String {
    let tls = security.tls_cert_file.is_some();
    let mut curl = String::from("curl -s");
    let scheme = match &security.ca_file {
        Some(ca) if tls => {
            curl += &format!(" --cacert {}", ca.display());
            "https"
        }
        _ if tls => "https",
        _ => "http",
    };
    if let Some(file) = &security.client_token_file {
        curl += &format!(" -H \"authorization: Bearer $(cat {})\"", file.display());
    } else if std::env::var_os("LEASEHOLD_CLIENT_TOKEN").is_some() {
        curl += " -H \"authorization: Bearer $LEASEHOLD_CLIENT_TOKEN\"";
    }
    curl + &format!(
        " -XPOST {scheme}://{endpoint}/v1/locks/demo/acquire -d '{{\"owner\":\"me\",\"ttl_ms\":10000}}' -H 'content-type: application/json'"
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }

    // Ensures the duration defaults shown in `serve --help` are the server's
    // own defaults, and the old `-ms` spellings still take milliseconds.
    #[test]
    fn serve_duration_defaults_and_old_spellings() {
        let serve = Serve::try_parse_from(["serve", "--id", "1", "--addr", "127.0.0.1:1", "--data", "d"]).unwrap();
        assert_eq!(serve.args.header_read_timeout, server::DEFAULT_HEADER_READ_TIMEOUT);
        assert_eq!(serve.args.request_timeout, api::DEFAULT_REQUEST_TIMEOUT);
        assert_eq!(serve.args.tick, Duration::from_millis(100));
        let old = ["--tick-ms", "50", "--request-timeout-ms", "2500", "--header-read-timeout-ms", "1000"];
        let base = ["serve", "--id", "1", "--addr", "127.0.0.1:1", "--data", "d"];
        let serve = Serve::try_parse_from(base.iter().chain(old.iter())).unwrap();
        assert_eq!(serve.args.tick, Duration::from_millis(50));
        assert_eq!(serve.args.request_timeout, Duration::from_millis(2500));
        assert_eq!(serve.args.header_read_timeout, Duration::from_secs(1));
        assert!(Serve::try_parse_from(base.iter().chain(["--tick", "5ms"].iter())).is_err(), "below 10ms");
    }

    // Ensures serve refuses to run open only outside loopback, and only
    // without --insecure: with no secret at all on any listener, or with no
    // cluster secret (and no peer certificates) where Raft RPC is served;
    // the refusal names the address and the way out.
    #[test]
    fn open_outside_loopback_needs_insecure() {
        let at = |client: &str, peer: Option<&str>| Listeners {
            client: client.parse().unwrap(),
            peer: peer.map(|p| p.parse().unwrap()),
        };
        let refused = |listeners: &Listeners, secrets: &Secrets, certificates: bool| {
            refuse_open_outside_loopback(listeners, secrets, certificates, false).is_err()
        };
        let open = Secrets::default();
        let secret = |s: &str| Some(leasehold_client::Secret::new(s, "test").unwrap());
        let tokens = Secrets { admin_token: secret("admin-token-0123456789"), ..Secrets::default() };
        let members = Secrets { cluster_secret: secret("cluster-secret-0123456789"), ..tokens.clone() };
        let outside = at("0.0.0.0:7701", None);
        let err = refuse_open_outside_loopback(&outside, &open, false, false).expect_err("refused").to_string();
        assert!(err.contains("0.0.0.0:7701") && err.contains("--insecure"), "{err}");
        assert!(refused(&at("10.0.0.11:7701", None), &open, false));
        assert!(refuse_open_outside_loopback(&outside, &open, false, true).is_ok());
        for loopback in ["127.0.0.1:7701", "[::1]:7701"] {
            assert!(!refused(&at(loopback, None), &open, false), "{loopback}");
        }
        // Tokens alone leave Raft RPC open: refused where it is served
        // outside loopback, unless the cluster secret or peer certificates
        // close it.
        let err = refuse_open_outside_loopback(&outside, &tokens, false, false).expect_err("refused").to_string();
        assert!(err.contains("Raft RPC on 0.0.0.0:7701") && err.contains("--cluster-secret-file"), "{err}");
        assert!(!refused(&outside, &members, false));
        assert!(!refused(&at("0.0.0.0:7701", Some("0.0.0.0:7801")), &tokens, true));
        assert!(refuse_open_outside_loopback(&outside, &tokens, false, true).is_ok());
        // With a peer listener, Raft RPC is there only.
        assert!(!refused(&at("0.0.0.0:7701", Some("127.0.0.1:7801")), &tokens, false));
        let err = refuse_open_outside_loopback(&at("127.0.0.1:7701", Some("10.0.0.11:7801")), &tokens, false, false)
            .expect_err("refused")
            .to_string();
        assert!(err.contains("10.0.0.11:7801"), "{err}");
        // A peer listener outside loopback with no secret at all is refused
        // as well: it would take Raft RPC from anyone.
        let err = refuse_open_outside_loopback(&at("127.0.0.1:7701", Some("10.0.0.11:7801")), &open, false, false)
            .expect_err("refused")
            .to_string();
        assert!(err.contains("10.0.0.11:7801"), "{err}");
        assert!(!refused(&at("127.0.0.1:7701", Some("127.0.0.1:7801")), &open, false));
        let base = ["serve", "--id", "1", "--addr", "10.0.0.11:7701", "--data", "d"];
        assert!(!Serve::try_parse_from(base).unwrap().args.insecure);
        assert!(Serve::try_parse_from(base.iter().chain(&["--insecure"])).unwrap().args.insecure);
    }
}
