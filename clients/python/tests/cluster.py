"""A real leasehold cluster for the tests: `leasehold serve` processes started
one by one (as src/local.rs does) on free loopback ports, with data in a
temporary folder. Every process is tracked by PID and only those PIDs are
ever signalled."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Optional

import httpx

import leasehold

TICK_MS = 100
#: Upper bound on an election.
ELECTION_BOUND = 20.0

_STARTED: set[int] = set()


def _kill_leftovers() -> None:
    # Last resort if a test run dies without its fixtures' teardown.
    for pid in list(_STARTED):
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break


atexit.register(_kill_leftovers)


def find_binary() -> Optional[Path]:
    """$LEASEHOLD_BIN, else the repo's release build, else its debug build."""
    env = os.environ.get("LEASEHOLD_BIN")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent.parent  # clients/python
    for build in ("release", "debug"):
        candidate = (here / ".." / ".." / "target" / build / "leasehold").resolve()
        if candidate.is_file():
            return candidate
    return None


def free_ports(n: int) -> list[int]:
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Cluster:
    def __init__(
        self,
        binary: Path,
        root: Path,
        n: int = 3,
        *,
        serve_args: tuple[str, ...] = (),
        ca_file: Optional[str] = None,
        token: Optional[str] = None,
    ) -> None:
        self.binary = binary
        self.root = root
        self.serve_args = serve_args
        self.ca_file = ca_file
        self.token = token
        self.scheme = "https" if ca_file else "http"
        self.addrs = {i + 1: f"127.0.0.1:{port}" for i, port in enumerate(free_ports(n))}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self._http = httpx.Client(
            trust_env=False,
            verify=leasehold._core.ssl_context(ca_file),
            timeout=1.0,
        )

    # --- processes -------------------------------------------------------------

    @property
    def ids(self) -> list[int]:
        return sorted(self.addrs)

    def endpoints(self) -> list[str]:
        return [self.addrs[i] for i in self.ids]

    def url(self, node: int) -> str:
        return f"{self.scheme}://{self.addrs[node]}"

    def log_path(self, node: int) -> Path:
        return self.root / f"node{node}.log"

    def start(self, node: int) -> None:
        assert node not in self.procs, f"node {node} already runs"
        peers = ",".join(f"{i}={a}" for i, a in sorted(self.addrs.items()))
        data = self.root / f"node{node}"
        data.mkdir(parents=True, exist_ok=True)
        with open(self.log_path(node), "ab") as log:
            proc = subprocess.Popen(
                [
                    str(self.binary), "serve",
                    "--id", str(node),
                    "--addr", self.addrs[node],
                    "--data", str(data),
                    "--tick-ms", str(TICK_MS),
                    "--peers", peers,
                    "--initial-cluster-state", "new",
                    *self.serve_args,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.procs[node] = proc
        _STARTED.add(proc.pid)

    def start_all(self) -> None:
        for node in self.ids:
            if node not in self.procs:
                self.start(node)

    def pid(self, node: int) -> int:
        return self.procs[node].pid

    def signal(self, node: int, sig: int) -> None:
        proc = self.procs.get(node)
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, sig)

    def stop_node(self, node: int) -> None:
        """SIGSTOP: the node hangs (connections open, no answers)."""
        self.signal(node, signal.SIGSTOP)

    def cont_node(self, node: int) -> None:
        self.signal(node, signal.SIGCONT)

    def kill(self, node: int) -> None:
        """kill -9 node ``node`` and reap it."""
        proc = self.procs.pop(node, None)
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        _STARTED.discard(proc.pid)

    def shutdown(self, grace: float = 5.0) -> None:
        """SIGTERM (and SIGCONT, for stopped nodes) to every node, SIGKILL to
        those still running after ``grace``."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
                os.kill(proc.pid, signal.SIGCONT)
        give_up = time.monotonic() + grace
        for node in list(self.procs):
            proc = self.procs[node]
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, give_up - time.monotonic()))
            self.kill(node)
        self._http.close()

    # --- views -----------------------------------------------------------------

    def status(self, node: int) -> Optional[dict[str, Any]]:
        # A node with any secret asks a credential of its status too.
        headers = {"authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            response = self._http.get(f"{self.url(node)}/v1/cluster/status", headers=headers)
        except httpx.TransportError:
            return None
        return response.json() if response.status_code == 200 else None  # type: ignore[no-any-return]

    def wait_for_leader(self, bound: float = ELECTION_BOUND) -> int:
        """Waits until one running node leads, every running node that answers
        agrees, and it has ticked (so it serves requests)."""
        give_up = time.monotonic() + bound
        while time.monotonic() < give_up:
            statuses = {n: self.status(n) for n in self.procs}
            answered = {n: s for n, s in statuses.items() if s is not None}
            leaders = [n for n, s in answered.items() if s.get("role") == "leader"]
            if len(leaders) == 1:
                leader = leaders[0]
                agreed = all(s.get("leader") == leader for s in answered.values())
                if agreed and answered[leader].get("tick", 0) > 0:
                    return leader
            time.sleep(0.05)
        raise AssertionError(f"no leader within {bound} s\n{self.logs()}")

    def follower_of(self, leader: int) -> int:
        return next(n for n in self.ids if n != leader)

    def client(self, **kwargs: Any) -> leasehold.Client:
        kwargs.setdefault("token", self.token)
        kwargs.setdefault("ca_file", self.ca_file)
        return leasehold.Client(self.endpoints(), **kwargs)

    def async_client(self, **kwargs: Any) -> leasehold.AsyncClient:
        kwargs.setdefault("token", self.token)
        kwargs.setdefault("ca_file", self.ca_file)
        return leasehold.AsyncClient(self.endpoints(), **kwargs)

    def logs(self, lines: int = 30) -> str:
        out = []
        for node in self.ids:
            try:
                text = self.log_path(node).read_text(errors="replace").splitlines()
            except FileNotFoundError:
                text = []
            out.append(f"--- node {node} (last lines) ---")
            out.extend(text[-lines:])
        return "\n".join(out)
