/**
 * {@link Lock}: a held lock whose lease a watchdog keeps renewing every
 * `ttl / 3`, with an `AbortSignal` that aborts the moment the holder can no
 * longer be sure it holds the lock. The timing is the watchdog's
 * (`watchdog.ts`).
 */

import { hostname } from "node:os";
import { randomBytes } from "node:crypto";

import * as calls from "./calls.js";
import { DecodeError, NotHeldError, StaleTokenError } from "./errors.js";
import { now, type Transport } from "./transport.js";
import { Timing, Watchdog, type LostReason } from "./watchdog.js";

export interface LockOptions {
  /** Lease time to live (ms, whole; the cluster accepts 3 s to 1 h). Default 10 s. */
  readonly ttlMs?: number;
  /** Holder identity, unique per holder. Default: {@link defaultOwner}. */
  readonly owner?: string;
  /** Wait up to this long in the lock's queue (ms); without it, `HeldError` at once. */
  readonly waitMs?: number;
  /** Subtracted from every lease for clock drift (ms). Default ttl / 10, at most ttl / 2. */
  readonly driftMarginMs?: number;
  /** After this lease expires, nobody gets the lock for this long (ms). */
  readonly lockDelayMs?: number;
}

export const DEFAULT_TTL_MS = 10_000;

/** A fresh owner id, `hostname-pid-random`, different for every call. */
export function defaultOwner(): string {
  const host = hostname().replace(/[^\x21-\x7e]/g, "").slice(0, 64) || "host";
  return `${host}-${process.pid}-${randomBytes(8).toString("hex")}`;
}

/**
 * The safe-deadline view every guard with a watchdog gives its holder:
 * {@link Lock} and {@link Session} alike.
 */
export abstract class Guarded {
  protected abstract readonly watchdog: Watchdog;

  /** Aborts (with a `LockLostError`) when lost, and when released: pass it to the work done under the lock. */
  get signal(): AbortSignal {
    return this.watchdog.signal;
  }

  /** Resolves with the reason once lost (`ended` once released first). */
  get lost(): Promise<LostReason> {
    return this.watchdog.lost;
  }

  /** True once lost or past the safe deadline: stop acting. */
  get isLost(): boolean {
    return this.watchdog.isLost;
  }

  /** Still safe, but a renewal failed or is overdue: finish or checkpoint the work now. */
  get atRisk(): boolean {
    return this.watchdog.atRisk;
  }

  get lostReason(): LostReason | null {
    return this.watchdog.lostReason;
  }

  /** The safe deadline on `performance.now()` (ms). */
  get validUntil(): number {
    return this.watchdog.validUntil;
  }

  /** Milliseconds left before the safe deadline (negative once past). */
  get remainingMs(): number {
    return this.watchdog.validUntil - now();
  }

  get ttlMs(): number {
    return this.watchdog.timing.ttlMs;
  }

  get driftMarginMs(): number {
    return this.watchdog.timing.driftMarginMs;
  }
}

/**
 * A held lock. Pass {@link token} with every write to the protected
 * resource and stop when {@link signal} aborts (or check {@link isLost}
 * before each action). Release it with `await using` or {@link release}:
 * the watchdog keeps renewing (and keeps Node's event loop alive) until then.
 */
export class Lock extends Guarded implements AsyncDisposable {
  protected readonly watchdog: Watchdog;
  #released = false;

  private constructor(
    private readonly transport: Transport,
    readonly name: string,
    readonly owner: string,
    readonly token: number,
    watchdog: Watchdog,
  ) {
    super();
    this.watchdog = watchdog;
  }

  /**
   * Acquires `name` (waiting in its queue up to `waitMs`) and starts the
   * watchdog. When the acquire took so long (a queue wait, retries) that
   * less than a renewal interval is left before the safe deadline, renews
   * once first, to re-anchor the lease.
   */
  static async acquire(transport: Transport, name: string, options: LockOptions = {}): Promise<Lock> {
    const requested = Timing.of(options.ttlMs ?? DEFAULT_TTL_MS, options.driftMarginMs);
    const owner = options.owner ?? defaultOwner();
    const started = now();
    const lease = await calls.acquire(transport, name, owner, { ttlMs: requested.ttlMs }, {
      ...(options.waitMs === undefined ? {} : { waitMs: options.waitMs }),
      ...(options.lockDelayMs === undefined ? {} : { lockDelayMs: options.lockDelayMs }),
    });
    // The shorter of what was asked and what was granted.
    const timing = new Timing(Math.min(requested.ttlMs, lease.ttlMs), requested.driftMarginMs);
    let anchor = Math.min(started, lease.sentAt);
    if (timing.deadline(anchor) < now() + timing.intervalMs) {
      const again = now();
      const renewed = await calls.renew(transport, name, lease.token, requested.ttlMs);
      if (renewed.token !== lease.token) {
        throw new DecodeError(`renewal of token ${lease.token} answered token ${renewed.token}`);
      }
      anchor = Math.min(again, renewed.sentAt);
    }
    const renewal = {
      subject: `lock ${name} (token ${lease.token})`,
      endedBy: ["stale_token", "not_held"],
      renew: async (deadline: number): Promise<number> => {
        const renewed = await calls.renew(transport, name, lease.token, requested.ttlMs, deadline);
        if (renewed.token !== lease.token) {
          throw new DecodeError(`renewal of token ${lease.token} answered token ${renewed.token}`);
        }
        return renewed.sentAt;
      },
    };
    return new Lock(transport, name, owner, lease.token, new Watchdog(renewal, timing, anchor));
  }

  /**
   * Stops the watchdog, then releases the lock. Throws the cluster's error
   * (`StaleTokenError`/`NotHeldError` when it was already lost) or
   * `UnavailableError`, in which case the lease runs out after its ttl.
   */
  async release(): Promise<void> {
    this.#released = true;
    await this.watchdog.stop();
    await calls.release(this.transport, this.name, this.token);
  }

  /**
   * `await using lock = await client.lock(...)`: releases on leaving the
   * block. A release refused because the lock was already lost is no
   * surprise and is not thrown.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#released) return;
    const lost = this.isLost;
    try {
      await this.release();
    } catch (e) {
      if (!(lost && (e instanceof NotHeldError || e instanceof StaleTokenError))) throw e;
    }
  }
}
