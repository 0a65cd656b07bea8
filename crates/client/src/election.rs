//! Elections: the endpoints ([`Client::campaign`], proclaim, resign, the
//! leader), the [`Election`] handle and the [`Leadership`] guard.
//!
//! An election is the lock of the same name whose holder carries a value,
//! so a leadership is kept exactly as a [`Lock`] is: the same watchdog renews
//! its lease every `ttl / 3` and fires `lost` by the safe deadline (see
//! `watchdog.rs`). A `Leadership` *is* that lock guard plus the value
//! (it derefs to [`Lock`]): its token fences writes as a lock's does, and
//! every signal a `Lock` gives, a `Leadership` gives too.

use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::http::Method;
use serde_json::Value;

use leasehold_proto::elections::{CampaignRequest, Leader, ProclaimRequest, ResignRequest, ResignResponse};
use leasehold_proto::{ErrorCode, FencingToken};

use crate::client::NO_BODY;
use crate::guard::Granted;
use crate::watchdog::{whole_ms, Timing};
use crate::{new_request_id, Client, ClientError, Lock, LockOptions, Watch};

impl Client {
    /// Stands as `candidate` in election `name` with a leadership of
    /// `ttl_ms`, waiting up to `wait` (FIFO) when another leads: the
    /// leader, with its token, and the send time of the request (the
    /// lease's anchor). `409 held` (naming the leader) without a wait.
    pub async fn campaign(
        &self,
        name: &str,
        candidate: &str,
        value: &Value,
        ttl_ms: u64,
        wait: Option<Duration>,
    ) -> Result<(Leader, Instant), ClientError> {
        let wait = wait.unwrap_or_default();
        let body = CampaignRequest {
            candidate: candidate.to_owned(),
            value: value.clone(),
            ttl_ms: Some(ttl_ms),
            session: None,
            wait_ms: (!wait.is_zero()).then_some(wait.as_millis() as u64),
            request_id: Some(new_request_id()),
            lock_delay_ms: None,
            seq: None,
        };
        self.call(Method::POST, &["v1", "elections", name, "campaign"], &[], Some(&body), wait).await
    }

    /// The leader under `token` announces `value`: `409 stale_token` for
    /// any other token.
    pub async fn proclaim(
        &self,
        name: &str,
        candidate: &str,
        token: FencingToken,
        value: &Value,
    ) -> Result<Leader, ClientError> {
        let body = ProclaimRequest {
            candidate: candidate.to_owned(),
            token,
            value: value.clone(),
            request_id: Some(new_request_id()),
        };
        let path = ["v1", "elections", name, "proclaim"];
        Ok(self.call(Method::POST, &path, &[], Some(&body), Duration::ZERO).await?.0)
    }

    /// The leader under `token` steps down; the next candidate waiting is
    /// elected in the same entry.
    pub async fn resign(&self, name: &str, candidate: &str, token: FencingToken) -> Result<(), ClientError> {
        let body = ResignRequest { candidate: candidate.to_owned(), token, request_id: Some(new_request_id()) };
        let path = ["v1", "elections", name, "resign"];
        let _: (ResignResponse, _) = self.call(Method::POST, &path, &[], Some(&body), Duration::ZERO).await?;
        Ok(())
    }

    /// The leader of election `name` (linearizable, with the index the read
    /// reflects), or `None` when it has none.
    pub async fn leader(&self, name: &str) -> Result<Option<Leader>, ClientError> {
        match self.call(Method::GET, &["v1", "elections", name], &[], NO_BODY, Duration::ZERO).await {
            Ok((leader, _)) => Ok(Some(leader)),
            Err(e) if e.code() == Some(ErrorCode::NoLeader) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The handle of election `name`.
    pub fn election(self: &Arc<Self>, name: &str) -> Election {
        Election { client: Arc::clone(self), name: name.to_owned() }
    }
}

/// One election of one cluster: campaign in it, read or observe its leader.
#[derive(Clone)]
pub struct Election {
    client: Arc<Client>,
    name: String,
}

impl Election {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Campaigns as `options.owner` announcing `value`, waiting up to
    /// `options.wait` to be elected, and returns the [`Leadership`] whose
    /// watchdog keeps it (as [`Lock::acquire`] does: the same options, the
    /// same errors and the same re-anchoring after a long wait).
    pub async fn campaign(&self, value: Value, options: LockOptions) -> Result<Leadership, ClientError> {
        let ttl_ms = whole_ms(options.ttl)?;
        let drift_margin = options.effective_drift_margin();
        Timing::new(Duration::from_millis(ttl_ms), drift_margin)?;
        let started = Instant::now();
        let (leader, sent_at) = self.client.campaign(&self.name, &options.owner, &value, ttl_ms, options.wait).await?;
        let grant = Granted { token: leader.token, ttl_ms: leader.ttl_ms, anchor: started.min(sent_at) };
        let lock =
            Lock::held(Arc::clone(&self.client), &self.name, options.owner, ttl_ms, drift_margin, grant, false).await?;
        Ok(Leadership { lock, value })
    }

    /// The current leader (linearizable), or `None`.
    pub async fn leader(&self) -> Result<Option<Leader>, ClientError> {
        self.client.leader(&self.name).await
    }

    /// The leadership changes as a [`Watch`]: `proclaimed` (a leader and
    /// its value), `released` and `expired` (that leadership ended). Without
    /// `after`, it starts with the current leader as the node serving it
    /// last applied it.
    pub fn observe(&self, after: Option<u64>) -> Watch {
        self.client.observe(&self.name, after)
    }
}

/// A leadership, kept by the watchdog of its lease: a [`Lock`] guard (see
/// there for `token`, `lost`, `is_lost`, `valid_until`) with the value
/// the leader announces. Dropping it does not resign: the leadership runs
/// out after its ttl; call [`resign`](Self::resign) to hand over at once.
pub struct Leadership {
    lock: Lock,
    value: Value,
}

impl Deref for Leadership {
    type Target = Lock;

    fn deref(&self) -> &Lock {
        &self.lock
    }
}

impl Leadership {
    /// The value this leader announced last.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// Announces `value`. `stale_token` once the leadership has ended.
    pub async fn proclaim(&mut self, value: Value) -> Result<(), ClientError> {
        let lock = &self.lock;
        lock.client().proclaim(lock.name(), lock.owner(), lock.token(), &value).await?;
        self.value = value;
        Ok(())
    }

    /// Stops renewing, then steps down: the next candidate waiting is
    /// elected in the same entry. Errors are the cluster's (`stale_token`
    /// or `not_held` when the leadership was already lost) or
    /// unavailability, in which case it runs out after its ttl.
    pub async fn resign(mut self) -> Result<(), ClientError> {
        self.lock.stop_renewing().await;
        let lock = &self.lock;
        lock.client().resign(lock.name(), lock.owner(), lock.token()).await
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership").field("lock", &self.lock).field("value", &self.value).finish()
    }
}
