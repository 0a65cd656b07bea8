/**
 * {@link LockSet}: several locks granted in one log entry under one token,
 * or none of them, released together. No watchdog renews a set: it is for
 * work that fits in its ttl (check {@link LockSet.validUntil}); for longer
 * work take the locks under a {@link Session} with `session.lockMany`,
 * whose one watchdog keeps them all.
 */

import * as calls from "./calls.js";
import type { Transport } from "./transport.js";
import type { Leases } from "./types.js";

export class LockSet implements AsyncDisposable {
  #released = false;

  constructor(
    private readonly transport: Transport,
    readonly leases: Leases,
  ) {}

  /** The fencing token of every lock of the set. */
  get token(): number {
    return this.leases.token;
  }

  get names(): string[] {
    return this.leases.grants.map((g) => g.name);
  }

  /** Until when (on `performance.now()`) no lock of the set can have expired: send time + ttl − `marginMs`. */
  validUntil(marginMs: number): number {
    const ttl = Math.min(...this.leases.grants.map((g) => g.ttlMs));
    return Math.max(this.leases.sentAt, this.leases.sentAt + ttl - marginMs);
  }

  /** Releases every lock of the set in one entry. */
  async release(): Promise<void> {
    this.#released = true;
    await calls.releaseMany(this.transport, this.names, this.token);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    if (!this.#released) await this.release();
  }
}
