/**
 * The TypeScript client of leasehold, a Raft-replicated lease lock service
 * with fencing tokens.
 *
 * ```ts
 * const client = new Client(["10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.3:7001"]);
 * await using lock = await client.lock("ledger", { ttlMs: 10_000 });
 * await writeLedger(entry, { fence: lock.token, signal: lock.signal });
 * ```
 *
 * Layout: `transport.ts` (endpoints, leader following, retries, request
 * ids), `calls.ts` (one function per endpoint), `wire.ts` (answers decoded),
 * `errors.ts` (one class per error code), `watchdog.ts` (the safe deadline,
 * `atRisk`, the loss signal), `lock.ts`, `session.ts`, `multi.ts` (the
 * guards), `client.ts` ({@link Client}).
 */

export { Client, type ClientOptions, type LockManyOptions } from "./client.js";
export type { AcquireOptions } from "./calls.js";
export * from "./errors.js";
export { Lock, Guarded, defaultOwner, DEFAULT_TTL_MS, type LockOptions } from "./lock.js";
export { LockSet } from "./multi.js";
export { Session, type SessionOptions } from "./session.js";
export { newRequestId, DEFAULT_RETRY_BUDGET_MS, DEFAULT_ATTEMPT_TIMEOUT_MS, LEADER_ADDR_HEADER } from "./transport.js";
export type { Lease, Leases, LeaseView, LeaseholdRecord, SessionView } from "./types.js";
export { LockLostError, type LostReason } from "./watchdog.js";
