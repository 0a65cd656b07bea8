//! A throwaway PostgreSQL server for `leasehold-lab demo payments`: `initdb` in a
//! temporary folder, `postgres` bound to 127.0.0.1 on a free port, stopped by
//! PID when the [`PgServer`] is dropped (the normal end, an error, a signal
//! that ends the run, a panic).
//!
//! PostgreSQL refuses to run as root. As root, the server and `initdb` run as
//! the `postgres` system user (Debian's package creates it; when it is
//! missing it is created with `useradd --system postgres`): the child sets
//! its gid and uid before `exec`, and the temporary folder is handed to that
//! user. As any other user they run as that user.
//!
//! The server accepts TCP on 127.0.0.1 only (no Unix socket) and one role,
//! `leasehold`, with a random password (scram-sha-256). Durability is off
//! (`fsync`, `synchronous_commit`, `full_page_writes`): the data is thrown
//! away at the end, and fencing does not depend on it.

use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::{chown, Pid, User};
use tempfile::TempDir;

use super::DemoError;

/// Where Debian's `postgresql` package puts the server, one folder per major
/// version.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";
/// The role the demo connects as.
const ROLE: &str = "leasehold";
/// How long the server may take to accept connections, and `initdb` to run.
const START_BOUND: Duration = Duration::from_secs(60);
/// How long a fast shutdown (SIGINT) may take before SIGKILL.
const STOP_BOUND: Duration = Duration::from_secs(10);

/// The newest `/usr/lib/postgresql/N/bin` with `initdb` and `postgres`.
pub fn find_bin_dir() -> Result<PathBuf, DemoError> {
    find_bin_dir_in(Path::new(DEBIAN_ROOT))
}

/// The newest `ROOT/N/bin` (by version number) with `initdb` and `postgres`.
fn find_bin_dir_in(root: &Path) -> Result<PathBuf, DemoError> {
    let missing = || {
        DemoError::PostgresMissing(format!(
            "no {}/*/bin/postgres: install PostgreSQL (apt-get install postgresql), \
             or give --postgres URL of a database you have",
            root.display()
        ))
    };
    let entries = std::fs::read_dir(root).map_err(|_| missing())?;
    entries
        .flatten()
        .filter_map(|e| {
            let version: Vec<u32> =
                e.file_name().to_str()?.split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
            let bin = e.path().join("bin");
            (bin.join("postgres").is_file() && bin.join("initdb").is_file()).then_some((version, bin))
        })
        .max()
        .map(|(_, bin)| bin)
        .ok_or_else(missing)
}

/// A child process killed (SIGKILL by PID) and reaped when dropped unless it
/// was reaped before.
struct Guarded(Child);

impl Guarded {
    fn pid(&self) -> Pid {
        Pid::from_raw(self.0.id() as i32)
    }

    fn try_wait(&mut self) -> Option<ExitStatus> {
        self.0.try_wait().ok().flatten()
    }

    /// Waits (polling, so a dropped future leaves the guard to kill it) for
    /// the process to exit, up to `bound`.
    async fn wait(&mut self, bound: Duration) -> Option<ExitStatus> {
        let give_up = Instant::now() + bound;
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            if Instant::now() >= give_up {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if self.try_wait().is_none() {
            // Until reaped the PID is still this child's, so the signal
            // cannot reach another process.
            let _ = kill(self.pid(), Signal::SIGKILL);
            let _ = self.0.wait();
        }
    }
}

/// A running PostgreSQL server. Fields drop in order: the server is stopped
/// before its folder is removed.
pub struct PgServer {
    server: Option<Guarded>,
    url: String,
    port: u16,
    bin: PathBuf,
    dir: TempDir,
}

impl PgServer {
    /// Initialises a cluster in a new temporary folder and starts a server
    /// on it; returns once it accepts connections.
    pub async fn start(bin: &Path) -> Result<PgServer, DemoError> {
        let user = server_user()?;
        let dir = tempfile::Builder::new().prefix(&format!("leasehold-demo-pg-{}-", std::process::id())).tempdir()?;
        let owner = |path: &Path| match &user {
            Some(u) => chown(path, Some(u.uid), Some(u.gid)).map_err(|e| DemoError::Postgres(format!("chown: {e}"))),
            None => Ok(()),
        };
        owner(dir.path())?;
        let password = random_password()?;
        let pwfile = dir.path().join("pwfile");
        std::fs::write(&pwfile, &password)?;
        std::fs::set_permissions(&pwfile, std::fs::Permissions::from_mode(0o600))?;
        owner(&pwfile)?;
        let data = dir.path().join("data");
        let log_path = dir.path().join("postgres.log");
        let log = File::create(&log_path)?;

        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("--pgdata")
            .arg(&data)
            .args(["--username", ROLE, "--auth", "scram-sha-256", "--encoding", "UTF8", "--locale", "C", "--no-sync"])
            .arg(format!("--pwfile={}", pwfile.display()));
        let mut initdb = spawn_as(&mut initdb, user.as_ref(), dir.path(), &log)?;
        let status = initdb.wait(START_BOUND).await;
        let _ = std::fs::remove_file(&pwfile);
        if !status.is_some_and(|s| s.success()) {
            return Err(DemoError::Postgres(format!("initdb failed ({status:?}): {}", log_tail(&log_path))));
        }

        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut postgres = Command::new(bin.join("postgres"));
        postgres
            .arg("-D")
            .arg(&data)
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-k", ""])
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .args(["-c", "max_connections=200"]);
        let server = spawn_as(&mut postgres, user.as_ref(), dir.path(), &log)?;
        let url = format!("postgresql://{ROLE}:{password}@127.0.0.1:{port}/postgres");
        let mut pg = PgServer { server: Some(server), url, port, bin: bin.to_path_buf(), dir };
        let give_up = Instant::now() + START_BOUND;
        loop {
            if let Some(status) = pg.server.as_mut().and_then(Guarded::try_wait) {
                return Err(DemoError::Postgres(format!("postgres exited ({status}): {}", log_tail(&log_path))));
            }
            match tokio_postgres::connect(&pg.url, tokio_postgres::NoTls).await {
                Ok(_) => return Ok(pg),
                Err(e) if Instant::now() >= give_up => {
                    return Err(DemoError::Postgres(format!("not accepting connections after {START_BOUND:?}: {e}")))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// `postgresql://leasehold:PASSWORD@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The same without the password, for printing.
    pub fn describe(&self) -> String {
        format!(
            "PostgreSQL ({}) at 127.0.0.1:{}, data in {}",
            self.bin.display(),
            self.port,
            self.dir.path().join("data").display()
        )
    }

    /// Fast shutdown (SIGINT by PID: roll back open transactions, end the
    /// sessions, stop), bounded; SIGKILL after that.
    pub async fn stop(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = kill(server.pid(), Signal::SIGINT);
            server.wait(STOP_BOUND).await;
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // The synchronous path (an error, a signal, a panic): fast shutdown,
        // bounded, then the guard's SIGKILL.
        if let Some(mut server) = self.server.take() {
            if server.try_wait().is_none() {
                let _ = kill(server.pid(), Signal::SIGINT);
                let give_up = Instant::now() + STOP_BOUND;
                while server.try_wait().is_none() && Instant::now() < give_up {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}

/// The user the server runs as: none (this process's own) unless this
/// process is root, then `postgres`, created when missing.
fn server_user() -> Result<Option<User>, DemoError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let lookup =
        || User::from_name("postgres").map_err(|e| DemoError::Postgres(format!("looking up user postgres: {e}")));
    if let Some(user) = lookup()? {
        return Ok(Some(user));
    }
    let status = Command::new("useradd")
        .args(["--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent"])
        .args(["--shell", "/usr/sbin/nologin", "postgres"])
        .status()?;
    match lookup()? {
        Some(user) => Ok(Some(user)),
        None => Err(DemoError::Postgres(format!(
            "PostgreSQL refuses to run as root and `useradd --system postgres` failed ({status})"
        ))),
    }
}

/// Spawns `command` in `cwd`, as `user` when given, in a process group of
/// its own (so a Ctrl-C at the terminal reaches the demo, which stops the
/// server itself), with stdout and stderr into `log`.
fn spawn_as(command: &mut Command, user: Option<&User>, cwd: &Path, log: &File) -> Result<Guarded, DemoError> {
    command.current_dir(cwd).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log.try_clone()?).process_group(0);
    if let Some(user) = user {
        let (uid, gid) = (user.uid, user.gid);
        // SAFETY: between fork and exec only async-signal-safe calls are
        // allowed; setgroups, setgid and setuid are plain system calls.
        unsafe {
            command.pre_exec(move || {
                nix::unistd::setgroups(&[gid])?;
                nix::unistd::setgid(gid)?;
                nix::unistd::setuid(uid)?;
                Ok(())
            });
        }
    }
    let child = command.spawn().map_err(|e| DemoError::Postgres(format!("starting {command:?}: {e}")))?;
    Ok(Guarded(child))
}

/// 32 hex digits from the kernel's random source.
fn random_password() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The last lines of the server's log, for an error message.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures the newest major version with both programs is picked (by
    // number, not by name), and a missing install says what to install.
    #[test]
    fn bin_dir_is_the_newest_or_says_what_to_install() {
        let root = tempfile::tempdir().unwrap();
        let missing = find_bin_dir_in(&root.path().join("nothing")).unwrap_err();
        assert!(matches!(missing, DemoError::PostgresMissing(_)));
        assert!(missing.to_string().contains("apt-get install postgresql"), "{missing}");
        assert!(find_bin_dir_in(root.path()).is_err(), "an empty folder has no server");
        for (version, programs) in
            [("9.6", &["initdb", "postgres"][..]), ("15", &["initdb", "postgres"]), ("16", &["initdb"])]
        {
            let bin = root.path().join(version).join("bin");
            std::fs::create_dir_all(&bin).unwrap();
            for program in programs {
                std::fs::write(bin.join(program), "").unwrap();
            }
        }
        std::fs::create_dir_all(root.path().join("not-a-version/bin")).unwrap();
        assert_eq!(find_bin_dir_in(root.path()).unwrap(), root.path().join("15/bin"));
    }
}
