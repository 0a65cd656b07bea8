//! Hostile clients (issue 37): what one client without credentials can do
//! to a cluster, each attack with real processes and real sockets.

use crate::common::*;
use leasehold_client::ErrorCode;
use leasehold_lab::chaos::hostile::PEER_PREFACE;

// Ensures the lab's flood speaks the preface the server listens for.
#[test]
fn the_flood_sends_the_servers_peer_preface() {
    assert_eq!(PEER_PREFACE, leasehold::peer::PREFACE);
}

// Ensures a client that holds more connections with the peer preface than a
// node has peer slots cannot keep the members from electing a new leader
// after the leader is killed, nor from serving a well-behaved client, while
// the flood goes on (it took every peer slot before the hello was checked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_preface_flood_does_not_stop_an_election() {
    bounded(async {
        let mut cluster = start_cluster(3).await;
        let old = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        step("flood every node with connections that send only the peer preface");
        kill_leader_under_preface_flood(&mut cluster, old, "hostile-flood").await;
    })
    .await;
}

// Ensures a gate admits only a token granted for its lock: another lock's
// grant, whose index is higher than the holder's, neither passes it nor
// raises it, and the holder's own token still passes (it raised the gate
// and locked the holder out before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_token_cannot_raise_a_gate() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let client = cluster.client();
        let holder = client.acquire("printer", "holder", 30_000).await.unwrap().token();
        let other = client.acquire("scanner", "other", 30_000).await.unwrap().token();
        assert!(other > holder, "the other lock's token is the higher one");
        step("the other lock's token is refused at the printer's gate");
        let forged = client.gate("dev1", "printer", other).await.unwrap_err();
        assert_eq!(forged.code(), Some(ErrorCode::StaleToken), "{forged}");
        step("the holder's token still passes");
        client.gate("dev1", "printer", holder).await.unwrap();
    })
    .await;
}
