//! [`ReadLock`] and [`WriteLock`]: a lock held in shared or exclusive mode,
//! each a [`Lock`] (same watchdog, safe deadline and `lost` signal) that
//! says in its type which mode it holds.
//!
//! Shared holders coexist; an exclusive holder excludes them all. Both wait
//! in the lock's one FIFO queue, so a waiting writer is not overtaken by
//! later readers. Every grant's token is above every earlier grant's of the
//! lock; only a writer's token should fence writes (docs/fencing.md,
//! "Shared holders").
//!
//! Both guards keep a lease of their own; to hold either side as long as
//! a session lives instead, take it with [`Session::read_lock`] or
//! [`Session::lock`](crate::Session::lock).
//!
//! [`Session::read_lock`]: crate::Session::read_lock

use std::ops::Deref;
use std::sync::Arc;

use crate::{Client, ClientError, Lock, LockOptions};

/// A lock held in shared mode: readers hold it together.
#[derive(Debug)]
pub struct ReadLock(Lock);

/// A lock held in exclusive mode, as a plain [`Lock`] is.
#[derive(Debug)]
pub struct WriteLock(Lock);

impl Client {
    /// Acquires `name` in shared mode (waiting up to `options.wait`) and
    /// keeps it with a watchdog. Errors as [`Client::lock`]; `409 held`
    /// while a writer holds it, `409 reserved` without a wait while anyone
    /// waits first, `409 deadlock` when waiting would close a cycle.
    pub async fn read_lock(self: &Arc<Self>, name: &str, options: LockOptions) -> Result<ReadLock, ClientError> {
        Lock::acquire_in_mode(Arc::clone(self), name, options, true).await.map(ReadLock)
    }

    /// Acquires `name` in exclusive mode: [`Client::lock`], typed as the
    /// writer's side of a read/write lock.
    pub async fn write_lock(self: &Arc<Self>, name: &str, options: LockOptions) -> Result<WriteLock, ClientError> {
        self.lock(name, options).await.map(WriteLock)
    }
}

impl ReadLock {
    /// Stops the watchdog, then releases this shared lease.
    pub async fn release(self) -> Result<(), ClientError> {
        self.0.release().await
    }
}

impl WriteLock {
    /// Stops the watchdog, then releases the lock.
    pub async fn release(self) -> Result<(), ClientError> {
        self.0.release().await
    }
}

/// The guard's token, safe deadline and `lost` signal are [`Lock`]'s.
impl Deref for ReadLock {
    type Target = Lock;

    fn deref(&self) -> &Lock {
        &self.0
    }
}

impl Deref for WriteLock {
    type Target = Lock;

    fn deref(&self) -> &Lock {
        &self.0
    }
}

impl From<ReadLock> for Lock {
    fn from(read: ReadLock) -> Lock {
        read.0
    }
}

impl From<WriteLock> for Lock {
    fn from(write: WriteLock) -> Lock {
        write.0
    }
}
