/**
 * The TypeScript client's conformance driver (`clients/conformance/PROTOCOL.md`):
 * JSON lines on stdin, each run through the client's public API as it
 * arrives, one answer line per request on stdout. It holds no lock logic:
 * guards, watchdogs, retries and deadlines are the client's.
 *
 * Built by `npm run build:test` into `build/scripts/`, started by
 * `clients/conformance/drivers/typescript`.
 */

import { createInterface } from "node:readline";
import { performance } from "node:perf_hooks";

import { ApiError, Client, DecodeError, Lock, LockSet, Session, UnavailableError } from "../src/index.js";

type Request = Record<string, unknown>;
type Answer = Record<string, unknown>;
type Guard = Lock | Session | LockSet;

class Invalid extends Error {}

function failure(error: unknown): Answer {
  const message = error instanceof Error ? error.message : String(error);
  if (error instanceof UnavailableError || error instanceof DecodeError) {
    const api = error instanceof ApiError ? error : null;
    return { kind: "unavailable", code: api?.code ?? null, status: api?.status ?? null, message };
  }
  if (error instanceof ApiError && error.status !== null) {
    return { kind: "api", code: error.code, status: error.status, message };
  }
  return { kind: "invalid", code: null, status: null, message };
}

function str(request: Request, key: string): string {
  const value = request[key];
  if (typeof value !== "string") throw new Invalid(`argument ${key} is not a string`);
  return value;
}

function num(request: Request, key: string): number {
  const value = request[key];
  if (typeof value !== "number") throw new Invalid(`argument ${key} is not a number`);
  return value;
}

function optional(request: Request, key: string): number | undefined {
  const value = request[key];
  return typeof value === "number" ? value : undefined;
}

/** `{key: value}` when `value` is set, else nothing: options under exactOptionalPropertyTypes. */
function given<K extends string, V>(key: K, value: V | undefined): Partial<Record<K, V>> {
  return value === undefined ? {} : ({ [key]: value } as Partial<Record<K, V>>);
}

function text(request: Request, key: string): string | undefined {
  const value = request[key];
  return typeof value === "string" ? value : undefined;
}

class Driver {
  readonly #guards = new Map<string, Guard>();
  #handles = 0;

  constructor(readonly client: Client) {}

  #keep(kind: string, guard: Guard): string {
    this.#handles += 1;
    const handle = `${kind}-${this.#handles}`;
    this.#guards.set(handle, guard);
    return handle;
  }

  #watched(request: Request): Lock | Session {
    const guard = this.#guards.get(str(request, "handle"));
    if (guard instanceof Lock || guard instanceof Session) return guard;
    throw new Invalid(`no lock or session ${String(request["handle"])}`);
  }

  async handle(request: Request): Promise<Answer> {
    const client = this.client;
    switch (request["op"]) {
      case "lock": {
        const lock = await client.lock(str(request, "name"), {
          ttlMs: num(request, "ttl_ms"),
          ...given("owner", text(request, "owner")),
          ...given("waitMs", optional(request, "wait_ms")),
          ...given("driftMarginMs", optional(request, "drift_margin_ms")),
        });
        return { handle: this.#keep("lock", lock), token: lock.token, owner: lock.owner };
      }
      case "guard": {
        const guard = this.#watched(request);
        return {
          token: guard instanceof Lock ? guard.token : null,
          lost: guard.isLost,
          at_risk: guard.atRisk,
          safe_remaining_ms: Math.round(guard.validUntil - performance.now()),
        };
      }
      case "wait_lost": {
        const guard = this.#watched(request);
        let timer: NodeJS.Timeout | undefined;
        const timeout = new Promise<null>((resolve) => {
          timer = setTimeout(() => resolve(null), num(request, "timeout_ms"));
        });
        const reason = await Promise.race([guard.lost, timeout]).finally(() => clearTimeout(timer));
        return reason === null
          ? { lost: false, reason: null, code: null }
          : { lost: true, reason: reason.kind, code: reason.code ?? null };
      }
      case "unlock": {
        const guard = this.#guards.get(str(request, "handle"));
        if (!(guard instanceof Lock || guard instanceof LockSet)) throw new Invalid("unlock names no lock");
        this.#guards.delete(str(request, "handle"));
        await guard.release();
        return {};
      }
      case "acquire": {
        const lease = await client.acquire(str(request, "name"), str(request, "owner"), num(request, "ttl_ms"), {
          ...given("waitMs", optional(request, "wait_ms")),
          ...given("requestId", text(request, "request_id")),
        });
        return { token: lease.token, ttl_ms: lease.ttlMs };
      }
      case "renew": {
        const lease = await client.renew(str(request, "name"), num(request, "token"), optional(request, "ttl_ms"));
        return { token: lease.token, ttl_ms: lease.ttlMs };
      }
      case "release":
        await client.release(str(request, "name"), num(request, "token"));
        return {};
      case "get": {
        const view = await client.get(str(request, "name"));
        return { lease: view === null ? null : { owner: view.owner, token: view.token } };
      }
      case "session_open": {
        const session = await client.session({ ttlMs: num(request, "ttl_ms") });
        return { handle: this.#keep("session", session), session: session.id };
      }
      case "session_lock": {
        const session = this.#guards.get(str(request, "session"));
        if (!(session instanceof Session)) throw new Invalid("session_lock names no session");
        const lease = await session.lock(str(request, "name"), given("waitMs", optional(request, "wait_ms")));
        return { handle: `${str(request, "session")}/${lease.name}`, token: lease.token };
      }
      case "session_close": {
        const session = this.#guards.get(str(request, "handle"));
        if (!(session instanceof Session)) throw new Invalid("session_close names no session");
        this.#guards.delete(str(request, "handle"));
        await session.close();
        return {};
      }
      case "multi_lock": {
        const names = request["names"];
        if (!Array.isArray(names) || !names.every((n): n is string => typeof n === "string")) {
          throw new Invalid("names is not a list of strings");
        }
        const set = await client.lockMany(names, {
          ttlMs: num(request, "ttl_ms"),
          ...given("owner", text(request, "owner")),
          ...given("waitMs", optional(request, "wait_ms")),
        });
        const tokens = Object.fromEntries(set.leases.grants.map((g) => [g.name, g.token]));
        return { handle: this.#keep("set", set), tokens };
      }
      case "record_write":
        await client.putRecord(str(request, "key"), str(request, "lock"), num(request, "token"), request["value"]);
        return {};
      case "record_read": {
        const record = await client.getRecord(str(request, "key"));
        return record === null ? { value: null, token: null } : { value: record.value, token: record.token };
      }
      case "gate_pass":
        await client.gate(str(request, "gate"), str(request, "lock"), num(request, "token"));
        return {};
      default:
        throw new Invalid(`unknown op ${JSON.stringify(request["op"])}`);
    }
  }
}

function write(answer: Answer): void {
  process.stdout.write(JSON.stringify(answer) + "\n");
}

async function main(): Promise<void> {
  const endpoints = process.env["LEASEHOLD_ENDPOINTS"];
  if (endpoints === undefined) throw new Error("LEASEHOLD_ENDPOINTS is not set");
  const budget = process.env["LEASEHOLD_RETRY_BUDGET_MS"];
  const token = process.env["LEASEHOLD_TOKEN"];
  const client = new Client(endpoints, {
    ...(token ? { token } : {}),
    ...(budget ? { retryBudgetMs: Number(budget) } : {}),
  });
  const driver = new Driver(client);
  write({ ready: true, client: "typescript", version: "0.1.0" });
  for await (const line of createInterface({ input: process.stdin })) {
    const request = JSON.parse(line) as Request;
    if (request["op"] === "shutdown") {
      write({ id: request["id"], ok: true });
      break;
    }
    driver.handle(request).then(
      (result) => write({ id: request["id"], ok: true, ...result }),
      (error: unknown) => write({ id: request["id"], ok: false, error: failure(error) }),
    );
  }
  // Guards still held keep their watchdogs' timers: the driver is done.
  process.exit(0);
}

void main();
