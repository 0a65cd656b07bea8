//! `serve --config FILE`: the file's settings start a node, environment
//! variables override the file and flags override both; an unknown key or
//! a malformed file stops `serve` before anything starts.

use std::process::Stdio;
use std::time::{Duration, Instant};

use leasehold_client::Client;
use leasehold_local::LocalCluster;

use crate::common::{bounded, step, ELECTION_BOUND};

/// `leasehold serve` with these arguments and extra environment variables,
/// its output to `log`; killed (by PID) when dropped.
fn serve(args: &[&str], env: &[(&str, &str)], log: &std::path::Path) -> tokio::process::Child {
    let log = std::fs::File::create(log).expect("log file");
    tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("serve")
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log file"))
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("serve starts")
}

// Ensures a node runs from a configuration file alone, and that for one
// setting (tick_ms, shown in /v1/cluster/status) a variable beats the file
// and a flag beats both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_over_environment_over_file() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let addrs = LocalCluster::free_addrs(3).unwrap();
        let mut nodes = Vec::new();
        for (i, addr) in addrs.iter().enumerate() {
            let file = dir.path().join(format!("node{i}.toml"));
            let data = dir.path().join(format!("data{i}"));
            std::fs::write(
                &file,
                format!(
                    "# one-node cluster\nid = 1\naddr = \"{addr}\"\ndata = \"{}\"\npeers = [\"1={addr}\"]\n\
                     initial_cluster_state = \"new\"\ntick_ms = 300\n",
                    data.display()
                ),
            )
            .unwrap();
            let file = file.to_str().unwrap().to_owned();
            let log = dir.path().join(format!("node{i}.log"));
            let (args, env, expected): (Vec<&str>, Vec<(&str, &str)>, u64) = match i {
                0 => (vec!["--config", &file], vec![], 300),
                1 => (vec!["--config", &file], vec![("LEASEHOLD_TICK_MS", "200")], 200),
                _ => (vec!["--config", &file, "--tick-ms", "150"], vec![("LEASEHOLD_TICK_MS", "200")], 150),
            };
            nodes.push((serve(&args, &env, &log), addr.to_string(), expected, log));
        }
        for (_, addr, expected, log) in &nodes {
            step(&format!("the node on {addr} leads with tick_ms {expected}"));
            let client = Client::new(std::slice::from_ref(addr)).unwrap();
            let give_up = Instant::now() + ELECTION_BOUND;
            let status = loop {
                match client.status().await {
                    Ok(s) if s.role == "leader" => break s,
                    _ if Instant::now() < give_up => tokio::time::sleep(Duration::from_millis(100)).await,
                    other => panic!("{other:?}\n{}", std::fs::read_to_string(log).unwrap()),
                }
            };
            assert_eq!((status.id, status.tick_ms), (1, *expected));
        }
    })
    .await;
}

// Ensures a misspelt key, a section, a value of the wrong shape, bad TOML and
// a missing file each stop `serve` with exit status 1 and a message naming
// the problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configuration_files_are_refused() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("tick_msec = 100\n", "unknown key `tick_msec`"),
            ("[tls]\ncert = \"a.pem\"\n", "unknown key `tls`"),
            ("peers = [{ id = 1 }]\n", "`peers` lists a table"),
            ("id = \n", "is not valid TOML"),
        ];
        for (i, (text, message)) in cases.iter().enumerate() {
            let file = dir.path().join(format!("bad{i}.toml"));
            std::fs::write(&file, text).unwrap();
            let log = dir.path().join(format!("bad{i}.log"));
            let mut child = serve(&["--config", file.to_str().unwrap()], &[], &log);
            let status = tokio::time::timeout(Duration::from_secs(30), child.wait()).await.unwrap().unwrap();
            let output = std::fs::read_to_string(&log).unwrap();
            assert_eq!(status.code(), Some(1), "{output}");
            assert!(output.contains(message), "{text:?}: {output}");
        }
        let log = dir.path().join("missing.log");
        let missing = dir.path().join("missing.toml");
        let mut child = serve(&["--config", missing.to_str().unwrap()], &[], &log);
        let status = tokio::time::timeout(Duration::from_secs(30), child.wait()).await.unwrap().unwrap();
        assert_eq!(status.code(), Some(1));
        assert!(std::fs::read_to_string(&log).unwrap().contains("reading --config"));
    })
    .await;
}
