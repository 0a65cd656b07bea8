/**
 * {@link Client}: the cluster's API over HTTP/JSON, and the guards built on
 * it. A client holds a list of endpoints and follows the leader, fails over
 * and retries as `transport.ts` says; every mutation carries a request id,
 * the same on every retry of one call.
 */

import * as calls from "./calls.js";
import { Lock, defaultOwner, DEFAULT_TTL_MS, type LockOptions } from "./lock.js";
import { LockSet } from "./multi.js";
import { Session, type SessionOptions } from "./session.js";
import { Transport, type TransportOptions } from "./transport.js";
import type { Lease, LeaseholdRecord, Leases, LeaseView, SessionView } from "./types.js";

export type ClientOptions = TransportOptions;

export interface LockManyOptions {
  readonly ttlMs?: number;
  readonly owner?: string;
  readonly waitMs?: number;
  readonly lockDelayMs?: number;
}

export class Client {
  readonly #transport: Transport;

  /**
   * `endpoints`: any nodes of the cluster, as `host:port` or
   * `http(s)://host:port` (a list or a comma-separated string). Options:
   * `token` (sent as a bearer token), `retryBudgetMs` (how long one call
   * keeps retrying, default 10 s), `attemptTimeoutMs` (one attempt, 6 s).
   */
  constructor(endpoints: string | readonly string[], options: ClientOptions = {}) {
    this.#transport = new Transport(endpoints, options);
  }

  /** The endpoints, as base URLs. */
  get endpoints(): string[] {
    return this.#transport.endpoints.map((e) => e.base);
  }

  // --- guards ---------------------------------------------------------------

  /** Acquires `name` and returns a {@link Lock} whose watchdog keeps renewing it. */
  lock(name: string, options: LockOptions = {}): Promise<Lock> {
    return Lock.acquire(this.#transport, name, options);
  }

  /** Opens a {@link Session}: one keepalive for every lock taken under it. */
  session(options: SessionOptions = {}): Promise<Session> {
    return Session.open(this.#transport, options);
  }

  /** Acquires every lock of `names` in one entry, under one token, or none ({@link LockSet}). */
  async lockMany(names: readonly string[], options: LockManyOptions = {}): Promise<LockSet> {
    const { ttlMs = DEFAULT_TTL_MS, owner = defaultOwner(), ...acquire } = options;
    return new LockSet(this.#transport, await calls.acquireMany(this.#transport, names, owner, { ttlMs }, acquire));
  }

  // --- locks ----------------------------------------------------------------

  /**
   * One acquire, no watchdog: `HeldError` at once when another owner holds
   * `name`, unless `waitMs` lets it wait in the queue (`WaitTimeoutError`).
   */
  acquire(name: string, owner: string, ttlMs: number, options: calls.AcquireOptions = {}): Promise<Lease> {
    return calls.acquire(this.#transport, name, owner, { ttlMs }, options);
  }

  /** Renews the lease of `token` (`StaleTokenError`/`NotHeldError` once it has ended). */
  renew(name: string, token: number, ttlMs?: number): Promise<Lease> {
    return calls.renew(this.#transport, name, token, ttlMs);
  }

  release(name: string, token: number): Promise<void> {
    return calls.release(this.#transport, name, token);
  }

  /** The lock `name` (linearizable), or `null` when free. */
  get(name: string): Promise<LeaseView | null> {
    return calls.get(this.#transport, name);
  }

  acquireMany(names: readonly string[], owner: string, ttlMs: number, options: calls.AcquireOptions = {}): Promise<Leases> {
    return calls.acquireMany(this.#transport, names, owner, { ttlMs }, options);
  }

  releaseMany(names: readonly string[], token: number): Promise<void> {
    return calls.releaseMany(this.#transport, names, token);
  }

  // --- sessions -------------------------------------------------------------

  createSession(owner: string, ttlMs: number): Promise<SessionView> {
    return calls.createSession(this.#transport, owner, ttlMs);
  }

  keepAlive(session: number): Promise<SessionView> {
    return calls.keepAlive(this.#transport, session);
  }

  /** Deletes `session`, releasing every lock under it; answers their names. */
  deleteSession(session: number): Promise<string[]> {
    return calls.deleteSession(this.#transport, session);
  }

  getSession(session: number): Promise<SessionView | null> {
    return calls.getSession(this.#transport, session);
  }

  // --- fencing --------------------------------------------------------------

  /** Whether `token` is the current token of `lock`: good only for the moment it is answered. */
  check(lock: string, token: number): Promise<{ current: boolean; token: number | null }> {
    return calls.check(this.#transport, lock, token);
  }

  /** Writes `value` under `key` if `token` is current for `lock` (`StaleTokenError` otherwise). */
  putRecord(key: string, lock: string, token: number, value: unknown): Promise<number> {
    return calls.putRecord(this.#transport, key, lock, token, value);
  }

  /** The record `key`, or `null` if never written. */
  getRecord(key: string): Promise<LeaseholdRecord | null> {
    return calls.getRecord(this.#transport, key);
  }

  /** Passes `token` of `lock` through gate `resource` (`StaleTokenError` below one admitted before). */
  gate(resource: string, lock: string, token: number): Promise<void> {
    return calls.gate(this.#transport, resource, lock, token);
  }
}
