//! Takes a lock, writes under its fencing token, and releases it.
//!
//! Against a local cluster (`leasehold up`): `cargo run -p leasehold-client --example lock`.

use std::time::Duration;

use leasehold_client::{Client, Lock, LockOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::new(&["127.0.0.1:7701", "127.0.0.1:7702", "127.0.0.1:7703"])?;
    // Waits up to 30 s in the lock's queue; a watchdog renews every ttl/3.
    let options = LockOptions::new(Duration::from_secs(10)).with_wait(Duration::from_secs(30));
    let lock = Lock::acquire(client.into(), "payments:42", options).await?;
    // Send the token with every write; the resource refuses lower ones.
    println!("holding {} under token {}", lock.name(), lock.token());
    tokio::select! {
        reason = lock.lost() => return Err(format!("lost the lock: {reason}").into()),
        () = tokio::time::sleep(Duration::from_millis(100)) => {} // the guarded work
    }
    lock.release().await?;
    Ok(())
}
