//! The `leasehold` command line as a user meets it: quiet logs on a clean
//! start and stop, the bearer secret's variables, exit codes, output
//! formats, shell completions and the man page.

use std::process::Output;
use std::time::Duration;

use crate::common::{
    bounded, start_cluster, start_secured_cluster, step, Material, CLIENT_TOKEN, ELECTION_BOUND, WRONG_TOKEN,
};

/// Variables of the caller's environment that would change what the CLI
/// sends; every run here starts without them.
const AMBIENT: [&str; 6] = [
    "LEASEHOLD_AUTH_TOKEN",
    "LEASEHOLD_AUTH_TOKEN_FILE",
    "LEASEHOLD_TOKEN",
    "LEASEHOLD_TOKEN_FILE",
    "LEASEHOLD_CA_FILE",
    "LEASEHOLD_ENDPOINTS",
];

/// Runs `leasehold args` with `env` (and none of [`AMBIENT`] otherwise),
/// killed if it outlives 60 s.
async fn leasehold(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
    for name in AMBIENT {
        command.env_remove(name);
    }
    command.args(args).envs(env.iter().copied()).kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("leasehold within 60 s")
        .expect("leasehold runs")
}

/// What a run printed, for assertion messages.
fn shown(out: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Log lines that a clean start and stop must not print (each was printed
/// on every start or on many stops before it was fixed).
const CLEAN_RUN_NOISE: [&str; 4] =
    ["A message will be ignored because ", "core_call fatal error", "tick not committed", "Can not initialize"];

// Ensures a 3-node cluster that starts, elects, ticks, stops and restarts
// cleanly logs neither openraft's stale-vote warning, nor errors for the Tick
// in flight at shutdown, nor a refused initialize on restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_start_and_stop_log_no_false_alarms() {
    bounded(async {
        let mut cluster = start_cluster(3).await;
        step("the leader ticks for a while");
        tokio::time::sleep(Duration::from_secs(1)).await;
        step("SIGTERM to every node");
        cluster.stop_all(Duration::from_secs(10));
        step("restart on the same data (node 1 was the bootstrapping node), tick, stop");
        cluster.start_all().expect("nodes restart");
        cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        cluster.stop_all(Duration::from_secs(10));
        for id in cluster.ids() {
            let log = std::fs::read_to_string(cluster.dir.path().join(format!("node{id}.log"))).expect("node log");
            assert!(log.contains("serving"), "node {id} never served:\n{log}");
            for noise in CLEAN_RUN_NOISE {
                assert!(!log.contains(noise), "node {id} logged {noise:?}:\n{log}");
            }
        }
    })
    .await;
}

// Ensures a `leasehold` call inside `leasehold run` keeps its credentials:
// the bearer secret comes from LEASEHOLD_AUTH_TOKEN_FILE, while `run` sets
// LEASEHOLD_TOKEN to the fencing token, and the inner `get` sees that token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leasehold_inside_run_keeps_its_credentials() {
    bounded(async {
        let material = Material::new();
        let cluster = start_secured_cluster(3, material.secrets(), &[]).await;
        let endpoints = cluster.endpoints().join(",");
        let token_file = material.path("client-token");
        let out_dir = tempfile::tempdir().expect("temp dir");
        let seen = out_dir.path().join("seen.json");
        let env =
            [("LEASEHOLD_ENDPOINTS", endpoints.as_str()), ("LEASEHOLD_AUTH_TOKEN_FILE", token_file.to_str().unwrap())];

        step("leasehold run -- sh -c 'leasehold get $LEASEHOLD_LOCK; echo $LEASEHOLD_TOKEN'");
        let script = r#""$0" get "$LEASEHOLD_LOCK" > "$1" && echo "$LEASEHOLD_TOKEN""#;
        let binary = env!("CARGO_BIN_EXE_leasehold");
        let run =
            leasehold(&["run", "--lock", "nested", "--", "sh", "-c", script, binary, seen.to_str().unwrap()], &env)
                .await;
        assert!(run.status.success(), "{}", shown(&run));
        let fencing_token: u64 =
            String::from_utf8_lossy(&run.stdout).trim().parse().expect("the command printed LEASEHOLD_TOKEN");
        let view: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&seen).expect("the inner get wrote")).expect("JSON");
        assert_eq!(view["token"].as_u64(), Some(fencing_token), "{view}");

        step("the same call with the secret in LEASEHOLD_AUTH_TOKEN, and with the old --token-file");
        let by_value = [("LEASEHOLD_ENDPOINTS", endpoints.as_str()), ("LEASEHOLD_AUTH_TOKEN", CLIENT_TOKEN)];
        let listed = leasehold(&["list"], &by_value).await;
        assert!(listed.status.success(), "{}", shown(&listed));
        let old_flag =
            leasehold(&["list", "--endpoints", &endpoints, "--token-file", token_file.to_str().unwrap()], &[]).await;
        assert!(old_flag.status.success(), "{}", shown(&old_flag));
    })
    .await;
}

// Ensures a script can tell the answers apart by exit status alone: no
// (free, held, not current) is 1, a usage error 2, a cluster that cannot be
// asked 3, refused credentials 4; and that piped output stays JSON while
// `-o table` prints aligned columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_statuses_separate_no_from_could_not_ask() {
    bounded(async {
        let material = Material::new();
        let cluster = start_secured_cluster(3, material.secrets(), &[]).await;
        let endpoints = cluster.endpoints().join(",");
        let env = [("LEASEHOLD_ENDPOINTS", endpoints.as_str()), ("LEASEHOLD_AUTH_TOKEN", CLIENT_TOKEN)];
        let status = |out: &Output| out.status.code();

        step("get of a free lock: 1");
        let free = leasehold(&["get", "free-lock"], &env).await;
        assert_eq!(status(&free), Some(1), "{}", shown(&free));

        step("acquire prints JSON to a pipe; a second owner is told no: 1");
        let taken = leasehold(&["acquire", "taken", "--owner", "alice"], &env).await;
        assert_eq!(status(&taken), Some(0), "{}", shown(&taken));
        let grant: serde_json::Value = serde_json::from_slice(&taken.stdout).expect("JSON on a pipe");
        let token = grant["token"].as_u64().expect("token").to_string();
        let held = leasehold(&["acquire", "taken", "--owner", "bob"], &env).await;
        assert_eq!(status(&held), Some(1), "{}", shown(&held));
        assert!(String::from_utf8_lossy(&held.stderr).contains("held"), "{}", shown(&held));

        step("check of a current token: 0; of an older one: 1");
        let current = leasehold(&["check", "taken", "--token", &token], &env).await;
        assert_eq!(status(&current), Some(0), "{}", shown(&current));
        let stale = leasehold(&["check", "taken", "--token", "1"], &env).await;
        assert_eq!(status(&stale), Some(1), "{}", shown(&stale));

        step("-o table: aligned columns with a header");
        let table = leasehold(&["get", "taken", "-o", "table"], &env).await;
        assert_eq!(status(&table), Some(0), "{}", shown(&table));
        let text = String::from_utf8_lossy(&table.stdout);
        let mut lines = text.lines();
        let (header, row) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
        assert!(header.starts_with("NAME") && header.contains("OWNER") && header.contains("TOKEN"), "{text}");
        assert!(row.starts_with("taken") && row.contains("alice") && row.contains(&token), "{text}");
        assert_eq!(header.find("OWNER"), row.find("alice"), "columns align:\n{text}");

        step("a wrong token: 4");
        let wrong = [("LEASEHOLD_ENDPOINTS", endpoints.as_str()), ("LEASEHOLD_AUTH_TOKEN", WRONG_TOKEN)];
        let refused = leasehold(&["get", "taken"], &wrong).await;
        assert_eq!(status(&refused), Some(4), "{}", shown(&refused));

        step("a usage error: 2");
        let usage = leasehold(&["acquire", "taken", "--no-such-flag"], &env).await;
        assert_eq!(status(&usage), Some(2), "{}", shown(&usage));

        step("no node listening: 3");
        // A socket bound but not listening: the port refuses connections,
        // and no other test's node can take it meanwhile (a port only
        // found free could be, and once answered "not held").
        let reserved = tokio::net::TcpSocket::new_v4().expect("a socket");
        reserved.bind("127.0.0.1:0".parse().expect("an address")).expect("bind");
        let closed = reserved.local_addr().expect("its address").to_string();
        let down = leasehold(&["get", "taken", "--endpoints", &closed], &[]).await;
        drop(reserved);
        assert_eq!(status(&down), Some(3), "{}", shown(&down));
    })
    .await;
}

// Ensures every duration flag takes the one syntax (10s, 250ms); flags that
// took milliseconds (`--ttl-ms 10000`) keep reading a bare number so, under
// either name; flags that never took a number refuse one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durations_have_one_syntax_and_old_flags_still_work() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let endpoints = cluster.endpoints().join(",");
        let env = [("LEASEHOLD_ENDPOINTS", endpoints.as_str())];
        let ttl_of = |out: &Output| {
            assert!(out.status.success(), "{}", shown(out));
            let grant: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
            (grant["ttl_ms"].as_u64().expect("ttl_ms"), grant["token"].as_u64().expect("token").to_string())
        };
        step("acquire --ttl 5s, renew --ttl-ms 7000, renew --ttl 1m");
        let (ttl, token) = ttl_of(&leasehold(&["acquire", "d", "--owner", "me", "--ttl", "5s"], &env).await);
        assert_eq!(ttl, 5_000);
        let (ttl, _) = ttl_of(&leasehold(&["renew", "d", "--token", &token, "--ttl-ms", "7000"], &env).await);
        assert_eq!(ttl, 7_000);
        let (ttl, _) = ttl_of(&leasehold(&["renew", "d", "--token", &token, "--ttl", "1m"], &env).await);
        assert_eq!(ttl, 60_000);
        step("acquire --ttl 10 is 10 ms, which the cluster refuses as an invalid argument: 2");
        let bare = leasehold(&["acquire", "e", "--owner", "me", "--ttl", "10"], &env).await;
        assert_eq!(bare.status.code(), Some(2), "{}", shown(&bare));
        assert!(String::from_utf8_lossy(&bare.stderr).contains("invalid_argument"), "{}", shown(&bare));
        step("run --ttl 10 (a flag that never took a number): refused before asking the cluster");
        let strict = leasehold(&["run", "--lock", "e", "--ttl", "10", "--", "true"], &env).await;
        assert_eq!(strict.status.code(), Some(2), "{}", shown(&strict));
        assert!(String::from_utf8_lossy(&strict.stderr).contains("missing unit"), "{}", shown(&strict));
    })
    .await;
}

// Ensures `completions` prints a script for each common shell and `man` a
// man page (or a folder of them) that name the subcommands and carry the
// exit-status table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_and_man_pages_name_the_subcommands() {
    bounded(async {
        for shell in ["bash", "zsh", "fish"] {
            step(&format!("completions {shell}"));
            let out = leasehold(&["completions", shell], &[]).await;
            assert!(out.status.success(), "{}", shown(&out));
            let script = String::from_utf8_lossy(&out.stdout);
            for subcommand in ["acquire", "run", "serve", "completions"] {
                assert!(script.contains(subcommand), "{shell} script lacks {subcommand}:\n{script}");
            }
        }

        step("man on stdout");
        let out = leasehold(&["man"], &[]).await;
        assert!(out.status.success(), "{}", shown(&out));
        let page = String::from_utf8_lossy(&out.stdout);
        assert!(page.starts_with(".ie") && page.contains(".TH leasehold 1"), "not a man page:\n{page}");
        assert!(page.contains("acquire") && page.contains("could not ask"), "{page}");

        step("man --out DIR: a page per command");
        let dir = tempfile::tempdir().expect("temp dir");
        let pages = dir.path().join("man1");
        let out = leasehold(&["man", "--out", pages.to_str().unwrap()], &[]).await;
        assert!(out.status.success(), "{}", shown(&out));
        for name in ["leasehold.1", "leasehold-acquire.1", "leasehold-run.1", "leasehold-member-add.1"] {
            let page = std::fs::read_to_string(pages.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(page.contains(".TH"), "{name} is not a man page");
        }
    })
    .await;
}

// Ensures the harness commands that moved to `leasehold-lab` say so, with
// the same arguments, as a usage error (2), and are not listed in --help.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_commands_point_to_leasehold_lab() {
    bounded(async {
        for (args, line) in [
            (
                &["bench", "--systems", "leasehold-3", "--runs", "1"][..],
                "leasehold-lab bench --systems leasehold-3 --runs 1",
            ),
            (&["chaos", "--help"][..], "leasehold-lab chaos --help"),
            (&["demo", "payments", "--no-fencing"][..], "leasehold-lab demo payments --no-fencing"),
        ] {
            step(&format!("leasehold {}", args.join(" ")));
            let out = leasehold(args, &[]).await;
            assert_eq!(out.status.code(), Some(2), "{}", shown(&out));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(stderr.lines().count(), 1, "one line: {}", shown(&out));
            assert!(stderr.trim_end().ends_with(line), "{}", shown(&out));
            assert!(out.stdout.is_empty(), "{}", shown(&out));
        }
        step("leasehold --help lists none of them");
        let help = leasehold(&["--help"], &[]).await;
        let help = String::from_utf8_lossy(&help.stdout);
        for moved in ["bench", "chaos", "demo"] {
            assert!(!help.lines().any(|l| l.trim_start().starts_with(moved)), "{moved} listed:\n{help}");
        }
    })
    .await;
}

// Ensures `acquire A B C` takes the locks atomically, printing one grant
// per lock under one token, and is told no (1) when one of them is held,
// taking none; one name still prints the single grant as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_of_several_names_is_atomic() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let endpoints = cluster.endpoints().join(",");
        let env = [("LEASEHOLD_ENDPOINTS", endpoints.as_str())];

        step("three names: one grant each, one token");
        let taken = leasehold(&["acquire", "a", "b", "c", "--owner", "alice"], &env).await;
        assert_eq!(taken.status.code(), Some(0), "{}", shown(&taken));
        let grants: Vec<serde_json::Value> = serde_json::from_slice(&taken.stdout).expect("a JSON array");
        let names: Vec<&str> = grants.iter().map(|g| g["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(grants.iter().all(|g| g["token"] == grants[0]["token"]), "{grants:?}");

        step("a set with a held lock: no (1), and none is taken");
        let refused = leasehold(&["acquire", "c", "d", "--owner", "bob"], &env).await;
        assert_eq!(refused.status.code(), Some(1), "{}", shown(&refused));
        assert!(String::from_utf8_lossy(&refused.stderr).contains("held"), "{}", shown(&refused));
        assert_eq!(leasehold(&["get", "d"], &env).await.status.code(), Some(1), "d was taken");

        step("one name: the single grant, as an object");
        let single = leasehold(&["acquire", "d", "--owner", "bob"], &env).await;
        let grant: serde_json::Value = serde_json::from_slice(&single.stdout).expect("JSON");
        assert_eq!((grant["name"].as_str(), grant["owner"].as_str()), (Some("d"), Some("bob")), "{grant}");
    })
    .await;
}

// Ensures a node refuses a data folder in a format it does not read, with
// what to do instead, before it touches the folder or opens its port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_folder_of_another_format_is_refused() {
    bounded(async {
        let dir = tempfile::tempdir().expect("temp dir");
        let format = dir.path().join("format");
        std::fs::write(&format, "99\n").expect("format written");
        let data = dir.path().to_str().expect("utf-8 path");
        let out = leasehold(&["serve", "--id", "1", "--addr", "127.0.0.1:9", "--data", data], &[]).await;
        assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("format 99") && stderr.contains("leasehold backup"), "{}", shown(&out));
        assert_eq!(std::fs::read_to_string(&format).expect("format kept"), "99\n");
        let entries: Vec<_> = std::fs::read_dir(dir.path()).expect("listed").collect();
        assert_eq!(entries.len(), 1, "nothing but the format file: {entries:?}");
    })
    .await;
}
