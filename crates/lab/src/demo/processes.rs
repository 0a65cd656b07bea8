//! The coordinator's side of the worker processes of `leasehold-lab demo
//! payments`: starting them, the line protocol over their stdin and stdout,
//! telling when one is stopped, and killing and reaping them.

use std::io::{BufRead, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::sync::mpsc;

use super::{DemoError, PaymentsOptions, POSTGRES_ENV};

/// What a worker process needs to be started.
pub(super) struct WorkerSpec<'a> {
    pub(super) binary: &'a Path,
    /// The database URL; handed over in the environment
    /// ([`POSTGRES_ENV`]), where a password in it is not on every `ps`.
    pub(super) postgres: &'a str,
    pub(super) schema: &'a str,
    pub(super) endpoints: &'a [String],
    pub(super) args: &'a PaymentsOptions,
    pub(super) id: u32,
}

pub(super) enum WorkerLine {
    Line(String),
    /// stdout closed: the worker exited (or closed it, which it never does).
    Closed,
}

/// A worker process, killed (SIGKILL by PID) and reaped when dropped unless
/// it was reaped before.
pub(super) struct WorkerProcess {
    pub(super) id: u32,
    child: Child,
    stdin: Option<ChildStdin>,
    pub(super) status: Option<ExitStatus>,
    pub(super) running: bool,
}

impl WorkerProcess {
    pub(super) fn spawn(
        spec: &WorkerSpec<'_>,
        lines: mpsc::UnboundedSender<(u32, WorkerLine)>,
    ) -> Result<Self, DemoError> {
        let id = spec.id;
        let mut command = Command::new(spec.binary);
        command
            .args(["demo", "payments-worker", "--schema", spec.schema])
            .env(POSTGRES_ENV, spec.postgres)
            .args(["--endpoints", &spec.endpoints.join(",")])
            .args(["--seconds", &spec.args.seconds.to_string()])
            .args(["--ttl", &format!("{}ms", spec.args.ttl.as_millis())])
            .args(["--worker-id", &id.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if spec.args.no_fencing {
            command.arg("--no-fencing");
        }
        let mut child = command.spawn().map_err(|source| DemoError::SpawnWorker { worker: id, source })?;
        let stdin = child.stdin.take();
        if let Some(stdout) = child.stdout.take() {
            // A plain thread per worker: the pipe is read with blocking reads
            // and the thread ends at EOF, when the worker exits.
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if lines.send((id, WorkerLine::Line(line))).is_err() {
                        return;
                    }
                }
                let _ = lines.send((id, WorkerLine::Closed));
            });
        }
        Ok(WorkerProcess { id, child, stdin, status: None, running: true })
    }

    pub(super) fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// Writes one command line to the worker's stdin; false if it is gone.
    pub(super) fn send(&mut self, command: &str) -> bool {
        let Some(stdin) = self.stdin.as_mut() else { return false };
        writeln!(stdin, "{command}").and_then(|()| stdin.flush()).is_ok()
    }

    pub(super) fn try_reap(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status.is_some()
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if self.try_reap() {
            return;
        }
        // Until reaped, the PID is still this child's (a zombie keeps it), so
        // the signals cannot reach another process. SIGCONT first: a worker
        // stopped by the fault would otherwise stay stopped until SIGKILL.
        let _ = kill(self.pid(), Signal::SIGCONT);
        let _ = kill(self.pid(), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// Whether every thread of `pid` is in the stopped state (`T`), per /proc.
/// On a system without /proc this stays false and the caller's bound ends
/// the wait.
pub(super) fn is_stopped(pid: Pid) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    let mut any = false;
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses and
        // may itself contain spaces or parentheses.
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().chars().next());
        if state != Some(Some('T')) {
            return false;
        }
        any = true;
    }
    any
}
