//! Takes a lock, works under its fencing token, and releases it.
//! Against a local cluster (`leasehold up`): `cargo run -p leasehold-client --example lock`.

use std::{sync::Arc, time::Duration};

use leasehold_client::{Client, FencingToken, LockOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Arc::new(Client::new(&["127.0.0.1:7701", "127.0.0.1:7702", "127.0.0.1:7703"])?);
    // Waits up to 30 s in the lock's queue; a watchdog renews every ttl/3.
    let options = LockOptions::new(Duration::from_secs(10)).with_wait(Duration::from_secs(30));
    let lock = client.lock("payments", options).await?;
    let token = lock.token(); // send this with every write; the resource refuses lower ones
    tokio::select! {
        reason = lock.lost() => return Err(format!("stop: lock lost: {reason}").into()),
        () = do_work(token) => {}
    }
    lock.release().await?;
    Ok(())
}

/// The guarded work: every write it makes carries `token`.
async fn do_work(token: FencingToken) {
    println!("working under fencing token {token}");
}
