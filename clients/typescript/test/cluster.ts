/**
 * A real leasehold cluster for the tests: `leasehold serve` processes
 * started from `$LEASEHOLD_BIN` (else the workspace's target/debug build) on
 * free loopback ports, with data in a temporary folder, and killed by PID
 * when the test ends (or this process exits).
 */

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { Client, type ClientOptions } from "../src/index.js";

const TICK_MS = 100;
const ELECTION_BOUND_MS = 20_000;
const REPO = resolve(fileURLToPath(import.meta.url), "../../../../..");
const BINARY = process.env["LEASEHOLD_BIN"] ?? join(REPO, "target/debug/leasehold");

/** Every node process this test process started, killed at exit whatever happened. */
const started = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of started) child.kill("SIGKILL");
});

async function freePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from({ length: n }, () => new Promise<ReturnType<typeof createServer>>((ok) => {
      const server = createServer();
      server.listen(0, "127.0.0.1", () => ok(server));
    })),
  );
  const ports = servers.map((s) => (s.address() as { port: number }).port);
  await Promise.all(servers.map((s) => new Promise((ok) => s.close(ok))));
  return ports;
}

export class Cluster {
  readonly #dir: string;
  readonly #addrs: Map<number, string>;
  readonly #procs = new Map<number, ChildProcess>();

  private constructor(dir: string, addrs: Map<number, string>) {
    this.#dir = dir;
    this.#addrs = addrs;
  }

  /** Starts `n` nodes and waits for a leader. */
  static async start(n = 3): Promise<Cluster> {
    const ports = await freePorts(n);
    const addrs = new Map(ports.map((port, i) => [i + 1, `127.0.0.1:${port}`]));
    const cluster = new Cluster(mkdtempSync(join(tmpdir(), "leasehold-ts-")), addrs);
    for (const id of addrs.keys()) cluster.#startNode(id);
    await cluster.waitForLeader();
    return cluster;
  }

  get endpoints(): string[] {
    return [...this.#addrs.values()];
  }

  client(options: ClientOptions = {}): Client {
    return new Client(this.endpoints, options);
  }

  #startNode(id: number): void {
    const peers = [...this.#addrs].map(([i, a]) => `${i}=${a}`).join(",");
    const log = openSync(join(this.#dir, `node${id}.log`), "a");
    const child = spawn(
      BINARY,
      ["serve", "--id", String(id), "--addr", this.#addrs.get(id)!, "--data", join(this.#dir, `node${id}`),
        "--tick-ms", String(TICK_MS), "--peers", peers, "--initial-cluster-state", "new"],
      { stdio: ["ignore", log, log] },
    );
    started.add(child);
    this.#procs.set(id, child);
  }

  /** Sends `signal` (SIGSTOP, SIGCONT) to every node. */
  signalAll(signal: NodeJS.Signals): void {
    for (const child of this.#procs.values()) child.kill(signal);
  }

  async #status(addr: string): Promise<{ role?: string; leader?: number; tick?: number; id?: number } | null> {
    try {
      const response = await fetch(`http://${addr}/v1/cluster/status`, { signal: AbortSignal.timeout(1000) });
      return response.ok ? ((await response.json()) as { role?: string; leader?: number; tick?: number; id?: number }) : null;
    } catch {
      return null;
    }
  }

  /** Waits until one node leads, every node that answers agrees, and it has ticked. */
  async waitForLeader(): Promise<number> {
    const giveUp = Date.now() + ELECTION_BOUND_MS;
    while (Date.now() < giveUp) {
      const statuses = (await Promise.all(this.endpoints.map((a) => this.#status(a)))).filter((s) => s !== null);
      const leaders = statuses.filter((s) => s.role === "leader");
      if (leaders.length === 1 && statuses.every((s) => s.leader === leaders[0]!.id) && (leaders[0]!.tick ?? 0) > 0) {
        return leaders[0]!.id!;
      }
      await new Promise((ok) => setTimeout(ok, 50));
    }
    throw new Error(`no leader within ${ELECTION_BOUND_MS} ms\n${this.logs()}`);
  }

  logs(): string {
    return [...this.#addrs.keys()]
      .map((id) => {
        let log = "";
        try {
          log = readFileSync(join(this.#dir, `node${id}.log`), "utf8");
        } catch {
          // Not started.
        }
        return `--- node ${id} ---\n${log.split("\n").slice(-30).join("\n")}`;
      })
      .join("\n");
  }

  /** Kills every node by PID (SIGCONT first, for stopped ones) and removes the data. */
  async stop(): Promise<void> {
    for (const child of this.#procs.values()) {
      child.kill("SIGCONT");
      child.kill("SIGKILL");
      if (child.exitCode === null && child.signalCode === null) {
        await new Promise((ok) => child.once("exit", ok));
      }
      started.delete(child);
    }
    this.#procs.clear();
    rmSync(this.#dir, { recursive: true, force: true });
  }
}
