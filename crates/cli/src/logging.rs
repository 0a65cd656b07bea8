//! Logging of every command: one line per event on stderr, as text for
//! people or JSON for log collectors (`--log-format`), filtered by
//! `RUST_LOG` (default: info, openraft and sled at warn).
//!
//! One family of openraft warnings is dropped: "A message will be ignored
//! because ...". openraft 0.10 logs it from `RaftCore::does_vote_match`
//! (openraft-0.10.0-alpha.37 `core/raft_core.rs`) when a notification reaches
//! the core after the node has left the state it was sent for, so ignoring
//! it is the correct behaviour, not a fault. Its two forms: "because
//! Candidate vote changed: ... when (VoteResponse)", when a vote response of
//! an earlier election of this node arrives after it started a new one, and
//! "because this node is no longer Leader: ... when (HigherVote)" (or
//! "because Leader vote changed"), when two replication streams both meet a
//! higher vote in the same term: the first one demotes the leader, the
//! second arrives stale. (0.9 worded it "because vote changed", and also
//! logged it on every healthy election, for the VoteResponse a node sends
//! itself after saving a vote; 0.10 checks that one only on a candidate.)
//! The event that matters is logged anyway, by the replication stream
//! ("seen a higher vote", kept) and by the ticker ("no longer leader").
//! Every other openraft warning still shows.

use std::fmt;
use std::io::IsTerminal;

use clap::ValueEnum;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (colored on a terminal).
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, fields).
    Json,
}

impl LogFormat {
    /// The value of `--log-format` that selects this format.
    pub fn as_arg(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// `--log-format`, global: it may follow any subcommand.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct LogFormatArg {
    /// Log line format on stderr: text, or json (one object per line) for log collectors.
    #[arg(long, global = true, value_enum, default_value_t, env = "LEASEHOLD_LOG_FORMAT")]
    pub log_format: LogFormat,
}

/// Installs the process's logger.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,openraft=warn,sled=warn".into());
    let registry = tracing_subscriber::registry().with(filter).with(ExpectedOpenraftNoise);
    let stderr = std::io::stderr;
    match format {
        LogFormat::Text => registry
            .with(tracing_subscriber::fmt::layer().with_writer(stderr).with_ansi(std::io::stderr().is_terminal()))
            .init(),
        LogFormat::Json => registry.with(tracing_subscriber::fmt::layer().json().with_writer(stderr)).init(),
    }
}

/// Drops the stale-notification warning described in the module comment,
/// matched by target, level and message, so nothing else is ever hidden.
struct ExpectedOpenraftNoise;

impl<S: Subscriber> Layer<S> for ExpectedOpenraftNoise {
    fn event_enabled(&self, event: &Event<'_>, _: Context<'_, S>) -> bool {
        let metadata = event.metadata();
        if *metadata.level() != Level::WARN || metadata.target() != "openraft::core::raft_core" {
            return true;
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        !message.0.starts_with(STALE_NOTIFICATION)
    }
}

/// How openraft's warning for a notification that outlived its vote begins
/// (both forms, see the module comment).
const STALE_NOTIFICATION: &str = "A message will be ignored because ";

/// The `message` field of an event, formatted.
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Records the message of every event that reaches it.
    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl<S: Subscriber> Layer<S> for Recorder {
        fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
            let mut message = Message(String::new());
            event.record(&mut message);
            self.0.lock().unwrap().push(message.0);
        }
    }

    // Ensures exactly the stale-notification warning is dropped, whatever
    // notification went stale: not other raft_core warnings, not errors, not
    // the same text from another target.
    #[test]
    fn only_the_stale_notification_warning_is_dropped() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(ExpectedOpenraftNoise).with(Recorder(seen.clone()));
        // As openraft 0.10 formats them (`RaftCore::does_vote_match`).
        let stale = "A message will be ignored because Candidate vote changed: msg sent by vote: T1-N1:uncommitted; \
                     current my vote: T2-N1:uncommitted; when (VoteResponse)";
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(target: "openraft::core::raft_core", "{}", stale);
            tracing::warn!(target: "openraft::core::raft_core", "A message will be ignored because this node is no longer Leader: msg sent by vote: T1-N1:committed; when (HigherVote)");
            tracing::error!(target: "openraft::core::raft_core", "{}", stale);
            tracing::warn!(target: "openraft::replication", "{}", stale);
            tracing::warn!(target: "openraft::core::raft_core", "something else");
        });
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(!seen.iter().any(|m| m.ends_with("(HigherVote)")), "{seen:?}");
        assert!(seen.contains(&"something else".to_string()), "{seen:?}");
    }
}
