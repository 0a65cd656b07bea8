/**
 * The lock, session and fence endpoints, one function each: the request it
 * sends (a fresh request id for every mutation, the same on all its
 * retries) and the answer decoded. The guards and the {@link Client} are
 * built on these.
 */

import { NoRecordError, NotHeldError, SessionNotFoundError } from "./errors.js";
import { newRequestId, pathOf, type Transport } from "./transport.js";
import type { Lease, LeaseholdRecord, Leases, LeaseView, SessionView } from "./types.js";
import * as wire from "./wire.js";

export interface AcquireOptions {
  /** Wait up to this long in the lock's queue when another owner holds it (ms). */
  readonly waitMs?: number;
  /** The request id to send (a fresh one by default). */
  readonly requestId?: string;
  /** After this lease expires (not when released), nobody gets the lock for this long (ms). */
  readonly lockDelayMs?: number;
}

/** How a lease lives: by its own ttl, or by a session (numbered by `seq`). */
export type Lifetime = { readonly ttlMs: number } | { readonly session: number; readonly seq: number };

function lifetime(body: Record<string, unknown>, life: Lifetime): void {
  if ("ttlMs" in life) {
    body["ttl_ms"] = life.ttlMs;
  } else {
    body["session"] = life.session;
    body["seq"] = life.seq;
  }
}

function waiting(body: Record<string, unknown>, options: AcquireOptions): number {
  const waitMs = options.waitMs ?? 0;
  if (waitMs > 0) body["wait_ms"] = waitMs;
  if (options.lockDelayMs !== undefined) body["lock_delay_ms"] = options.lockDelayMs;
  return waitMs;
}

export async function acquire(
  t: Transport,
  name: string,
  owner: string,
  life: Lifetime,
  options: AcquireOptions = {},
  deadline?: number,
): Promise<Lease> {
  const body: Record<string, unknown> = { owner, request_id: options.requestId ?? newRequestId() };
  lifetime(body, life);
  const waitMs = waiting(body, options);
  const { data, sentAt } = await t.send({ method: "POST", path: pathOf("v1", "locks", name, "acquire"), body, waitMs }, deadline);
  return wire.lease(data, sentAt);
}

export async function renew(t: Transport, name: string, token: number, ttlMs?: number, deadline?: number): Promise<Lease> {
  const body: Record<string, unknown> = { token, request_id: newRequestId() };
  if (ttlMs !== undefined) body["ttl_ms"] = ttlMs;
  const { data, sentAt } = await t.send({ method: "POST", path: pathOf("v1", "locks", name, "renew"), body }, deadline);
  return wire.lease(data, sentAt);
}

export async function release(t: Transport, name: string, token: number): Promise<void> {
  const body = { token, request_id: newRequestId() };
  await t.send({ method: "POST", path: pathOf("v1", "locks", name, "release"), body });
}

export async function get(t: Transport, name: string): Promise<LeaseView | null> {
  try {
    const { data } = await t.send({ method: "GET", path: pathOf("v1", "locks", name) });
    return wire.leaseView(data);
  } catch (e) {
    if (e instanceof NotHeldError) return null;
    throw e;
  }
}

export async function acquireMany(
  t: Transport,
  names: readonly string[],
  owner: string,
  life: Lifetime,
  options: AcquireOptions = {},
): Promise<Leases> {
  const body: Record<string, unknown> = { names: [...names], owner, request_id: options.requestId ?? newRequestId() };
  lifetime(body, life);
  const waitMs = waiting(body, options);
  const { data, sentAt } = await t.send({ method: "POST", path: "/v1/multi/acquire", body, waitMs });
  return wire.leases(data, sentAt);
}

export async function releaseMany(t: Transport, names: readonly string[], token: number): Promise<void> {
  const body = { names: [...names], token, request_id: newRequestId() };
  await t.send({ method: "POST", path: "/v1/multi/release", body });
}

export async function createSession(t: Transport, owner: string, ttlMs: number): Promise<SessionView> {
  const body = { owner, ttl_ms: ttlMs, request_id: newRequestId() };
  const { data, sentAt } = await t.send({ method: "POST", path: "/v1/sessions", body });
  return wire.sessionView(data, sentAt);
}

export async function keepAlive(t: Transport, session: number, seq?: number, deadline?: number): Promise<SessionView> {
  const body: Record<string, unknown> = { request_id: newRequestId() };
  if (seq !== undefined) body["seq"] = seq;
  const path = pathOf("v1", "sessions", String(session), "keepalive");
  const { data, sentAt } = await t.send({ method: "POST", path, body }, deadline);
  return wire.sessionView(data, sentAt);
}

/** Deletes `session`, releasing every lock under it; answers their names. */
export async function deleteSession(t: Transport, session: number): Promise<string[]> {
  // A request id, like every mutation: a retry after a lost answer (the
  // session already deleted) gets the first answer again, not a 404.
  const path = `${pathOf("v1", "sessions", String(session))}?request_id=${newRequestId()}`;
  const { data } = await t.send({ method: "DELETE", path });
  const released = wire.object(data, "a deleted session")["released"];
  return Array.isArray(released) ? released.filter((n): n is string => typeof n === "string") : [];
}

export async function getSession(t: Transport, session: number): Promise<SessionView | null> {
  try {
    const { data, sentAt } = await t.send({ method: "GET", path: pathOf("v1", "sessions", String(session)) });
    return wire.sessionView(data, sentAt);
  } catch (e) {
    if (e instanceof SessionNotFoundError) return null;
    throw e;
  }
}

/** Whether `token` is the current token of `lock` (linearizable), and the current token. */
export async function check(t: Transport, lock: string, token: number): Promise<{ current: boolean; token: number | null }> {
  const { data } = await t.send({ method: "POST", path: "/v1/fence/check", body: { lock, token } });
  const d = wire.object(data, "a check");
  return { current: d["current"] === true, token: typeof d["token"] === "number" ? d["token"] : null };
}

/** Writes `value` under `key` if `token` is the current token of `lock`; answers the entry's index. */
export async function putRecord(t: Transport, key: string, lock: string, token: number, value: unknown): Promise<number> {
  const body = { lock, token, value, request_id: newRequestId() };
  const { data } = await t.send({ method: "PUT", path: pathOf("v1", "records", key), body });
  return wire.int(wire.object(data, "a written record"), "index");
}

export async function getRecord(t: Transport, key: string): Promise<LeaseholdRecord | null> {
  try {
    const { data } = await t.send({ method: "GET", path: pathOf("v1", "records", key) });
    return wire.record(data);
  } catch (e) {
    if (e instanceof NoRecordError) return null;
    throw e;
  }
}

/** Passes `token` of `lock` through gate `resource`: admitted when not below any admitted before. */
export async function gate(t: Transport, resource: string, lock: string, token: number): Promise<void> {
  const body = { lock, token, request_id: newRequestId() };
  await t.send({ method: "POST", path: pathOf("v1", "fence", "gate", resource), body });
}
