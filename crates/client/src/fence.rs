//! The fence endpoints on [`Client`], for resources that cannot keep
//! tokens themselves: the fence check, fenced records and gates
//! (`/v1/fence`, `/v1/records`).

use std::time::Duration;

use ::http::Method;

use leasehold_proto::fence::{
    CheckRequest, CheckResponse, GateRequest, GateResponse, PutRecordRequest, PutRecordResponse, Record,
};
use leasehold_proto::{ErrorCode, FencingToken};

use crate::client::NO_BODY;
use crate::{new_request_id, Client, ClientError};

impl Client {
    /// Whether `token` is the current token of `lock` (linearizable); also
    /// returns the current token, `None` when the lock is free.
    pub async fn check(&self, lock: &str, token: FencingToken) -> Result<(bool, Option<FencingToken>), ClientError> {
        let body = CheckRequest { lock: lock.to_owned(), token };
        let (reply, _): (CheckResponse, _) =
            self.call(Method::POST, &["v1", "fence", "check"], &[], Some(&body), Duration::ZERO).await?;
        Ok((reply.current, reply.token))
    }

    /// Writes `value` under record `key` if `token` is the current token of
    /// `lock`; `409 stale_token` (with `current_token`) otherwise. Returns
    /// the index of the entry that wrote it.
    pub async fn put_record(
        &self,
        key: &str,
        lock: &str,
        token: FencingToken,
        value: &serde_json::Value,
    ) -> Result<u64, ClientError> {
        let body =
            PutRecordRequest { lock: lock.to_owned(), token, value: value.clone(), request_id: Some(new_request_id()) };
        let (reply, _): (PutRecordResponse, _) =
            self.call(Method::PUT, &["v1", "records", key], &[], Some(&body), Duration::ZERO).await?;
        Ok(reply.index)
    }

    /// The record `key` (`{"key","value","lock","token","index"}`), or `None`.
    pub async fn get_record(&self, key: &str) -> Result<Option<Record>, ClientError> {
        match self.call(Method::GET, &["v1", "records", key], &[], NO_BODY, Duration::ZERO).await {
            Ok((record, _)) => Ok(Some(record)),
            Err(e) if e.code() == Some(ErrorCode::NoRecord) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Passes `token` of `lock` through gate `resource`: admitted when it is
    /// at least the highest admitted so far, `409 stale_token` otherwise.
    pub async fn gate(&self, resource: &str, lock: &str, token: FencingToken) -> Result<(), ClientError> {
        let body = GateRequest { lock: lock.to_owned(), token, request_id: Some(new_request_id()) };
        let path = ["v1", "fence", "gate", resource];
        let _: (GateResponse, _) = self.call(Method::POST, &path, &[], Some(&body), Duration::ZERO).await?;
        Ok(())
    }
}
