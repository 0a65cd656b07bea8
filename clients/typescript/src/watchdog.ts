/**
 * The watchdog shared by {@link Lock} (which renews one lease) and
 * {@link Session} (which keeps one session, and so all its locks, alive):
 * what it renews differs, the timing and the loss signal do not (as
 * `watchdog.rs` in the Rust client and `_watchdog.py` in the Python one).
 *
 * Timing: the cluster never expires a lease or a session before `ttl` of
 * real time has passed since the entry that granted or renewed it was
 * committed, and that commit happens after the client sent the request. So
 * on this process's monotonic clock (`performance.now()`) it is certainly
 * still alive until
 *
 *     anchor + ttl − driftMargin
 *
 * where `anchor` is the instant the client started the call that produced
 * the last grant or renewal (no later than the send of its first attempt)
 * and `driftMargin` (default ttl / 10) covers the rate difference between
 * this machine's clock and the leader's, and the watchdog's own scheduling
 * delays. That instant is the *safe deadline*, `validUntil`. The server's
 * `expires_in_ms` plays no part: it is counted from the commit, which the
 * client cannot observe.
 *
 * The watchdog renews every `ttl / 3` after the anchor. A failed renewal is
 * retried with a short back-off until the safe deadline; every attempt is
 * cut off at that deadline, so the loss is signalled no later than the safe
 * deadline even when every node hangs. A renewal the cluster refuses because
 * the lease or session has ended signals the loss at once.
 *
 * Between a renewal going wrong and the safe deadline the holder is *at
 * risk* (`atRisk`): still safe, but the watchdog cannot say it will stay so.
 * That is the case once an attempt of the due renewal has failed, or when
 * the due renewal is still unanswered half an interval after it was due
 * (every node hangs, so no attempt fails), until a renewal succeeds.
 */

import { InvalidArgumentError, clientSide } from "./errors.js";
import { hasCode, now } from "./transport.js";

/** First pause after a failed renewal (ms); it doubles up to MAX_BACKOFF_MS. */
const INITIAL_BACKOFF_MS = 50;
const MAX_BACKOFF_MS = 500;

/**
 * Why a lock or a session stopped protecting its holder.
 *
 * - `expired`: the safe deadline passed without a successful renewal (no
 *   quorum, nodes unreachable or hung, this process paused). The lease may
 *   still be held on the cluster, but nothing guarantees it any more.
 * - `revoked`: the cluster answered a renewal with `code` (`stale_token` or
 *   `not_held` for a lock, `session_not_found` for a session): it has ended
 *   and another owner may hold the lock.
 * - `ended`: the guard was released before anything was lost.
 */
export interface LostReason {
  readonly kind: "expired" | "revoked" | "ended";
  readonly message: string;
  readonly code?: string;
}

/** The reason an aborted guard's `signal` carries. */
export class LockLostError extends Error {
  override name = "LockLostError";
  constructor(readonly reason: LostReason) {
    super(`${reason.kind}: ${reason.message}`);
  }
}

/** The safe-deadline arithmetic of one ttl (ms). */
export class Timing {
  constructor(
    readonly ttlMs: number,
    readonly driftMarginMs: number,
  ) {}

  /** The timing of `ttlMs` with `driftMarginMs` (default ttl / 10), which must be at most half of it. */
  static of(ttlMs: number, driftMarginMs?: number): Timing {
    if (!Number.isSafeInteger(ttlMs) || ttlMs <= 0) {
      throw clientSide(InvalidArgumentError, "invalid_argument", `ttl ${ttlMs} ms is not a positive whole number of ms`);
    }
    const margin = driftMarginMs ?? ttlMs / 10;
    if (!(margin >= 0) || margin > ttlMs / 2) {
      throw clientSide(InvalidArgumentError, "invalid_argument", `drift margin ${margin} ms is not between 0 and half the ttl ${ttlMs} ms`);
    }
    return new Timing(ttlMs, margin);
  }

  /** The safe deadline of a lease anchored at `anchor`. */
  deadline(anchor: number): number {
    return Math.max(anchor, anchor + this.ttlMs - this.driftMarginMs);
  }

  /** Time between the anchor and the next renewal. */
  get intervalMs(): number {
    return this.ttlMs / 3;
  }

  /**
   * When a renewal due at `anchor + interval` that has not succeeded yet
   * puts the holder at risk though no attempt failed: half an interval
   * late, `anchor + ttl / 2`, never after the safe deadline (the margin is at
   * most `ttl / 2`).
   */
  overdue(anchor: number): number {
    return anchor + this.intervalMs * 1.5;
  }
}

/** What a watchdog keeps alive. */
export interface Renewal {
  /** What the messages call it. */
  readonly subject: string;
  /** The error codes of a renewal that mean the cluster has ended it. */
  readonly endedBy: readonly string[];
  /** Sends one renewal, giving up at `deadline`; answers its first attempt's send time. */
  renew(deadline: number): Promise<number>;
}

/** A running watchdog: the safe deadline, `atRisk`, and the loss signal. */
export class Watchdog {
  readonly timing: Timing;
  readonly #renewal: Renewal;
  #anchor: number;
  #failing = false;
  #lost: LostReason | null = null;
  #stopped = false;
  readonly #controller = new AbortController();
  readonly #lostPromise: Promise<LostReason>;
  #resolveLost!: (reason: LostReason) => void;
  readonly #running: Promise<void>;
  /** Ends the current pause early (set while one runs). */
  #wake: (() => void) | undefined;

  constructor(renewal: Renewal, timing: Timing, anchor: number) {
    this.#renewal = renewal;
    this.timing = timing;
    this.#anchor = anchor;
    this.#lostPromise = new Promise((resolve) => {
      this.#resolveLost = resolve;
    });
    // A watchdog that dies (a bug) renews no more: that is a loss, not a crash.
    this.#running = this.#run().catch((e: unknown) => {
      this.#fire({ kind: "expired", message: `the watchdog stopped: ${e instanceof Error ? e.message : String(e)}` });
    });
  }

  /** The safe deadline on `performance.now()`: it only moves forward, and stops once lost. */
  get validUntil(): number {
    return this.timing.deadline(this.#anchor);
  }

  /** True once lost, or once the safe deadline has passed (the watchdog signals it then). */
  get isLost(): boolean {
    return this.#lost !== null || now() >= this.validUntil;
  }

  /** Still safe, but a renewal is going wrong (see the module docs). */
  get atRisk(): boolean {
    const t = now();
    return this.#lost === null && !this.#stopped && t < this.validUntil && (this.#failing || t >= this.timing.overdue(this.#anchor));
  }

  get lostReason(): LostReason | null {
    return this.#lost;
  }

  /** Aborted (with a {@link LockLostError}) when lost, or when the guard is released. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Resolves with the reason when lost, or `ended` when stopped first. */
  get lost(): Promise<LostReason> {
    return this.#lostPromise;
  }

  /** Stops the watchdog and waits until it has stopped: no renewal is sent after. */
  async stop(): Promise<void> {
    if (!this.#stopped) {
      this.#stopped = true;
      this.#signal({ kind: "ended", message: "the guard was released" });
    }
    this.#wake?.();
    await this.#running;
  }

  /** The cluster said it has ended (outside a renewal: a session's acquire). */
  revoked(code: string, message: string): void {
    this.#fire({ kind: "revoked", message, code });
  }

  /** Sleeps until `at`, or until stopped. */
  async #pause(at: number): Promise<void> {
    const ms = at - now();
    if (ms <= 0 || this.#stopped) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.#wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.#wake = undefined;
  }

  async #run(): Promise<void> {
    for (;;) {
      await this.#pause(this.#anchor + this.timing.intervalMs);
      if (this.#stopped) return;
      const outcome = await this.#renewBefore(this.validUntil);
      if (this.#stopped) return;
      if (typeof outcome === "number") {
        this.#anchor = Math.max(this.#anchor, outcome);
        this.#failing = false;
      } else {
        this.#fire(outcome);
        return;
      }
    }
  }

  /** Renews, retrying failures, until `deadline`: the new anchor, or why it is lost. */
  async #renewBefore(deadline: number): Promise<number | LostReason> {
    let backoff = INITIAL_BACKOFF_MS;
    let lastError = "no renewal attempt finished";
    for (;;) {
      if (this.#stopped) return this.#anchor;
      if (now() >= deadline) {
        return { kind: "expired", message: `no renewal before the safe deadline (${lastError})` };
      }
      const started = now();
      try {
        const sentAt = await cutOffAt(this.#renewal.renew(deadline), deadline);
        // Past the deadline it is no longer known to be safe: a success that
        // comes in now does not count.
        if (now() < deadline) return Math.min(started, sentAt);
        lastError = "the renewal was answered after the safe deadline";
        continue;
      } catch (e) {
        if (hasCode(e, this.#renewal.endedBy)) {
          return { kind: "revoked", message: e.message, code: e.code };
        }
        lastError = e instanceof Error ? e.message : String(e);
      }
      if (now() >= deadline) continue;
      this.#failing = true;
      await this.#pause(Math.min(now() + backoff, deadline));
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
    }
  }

  #fire(reason: LostReason): void {
    if (this.#lost !== null || this.#stopped) return;
    this.#lost = reason;
    this.#signal(reason);
  }

  #signal(reason: LostReason): void {
    this.#resolveLost(reason);
    if (!this.#controller.signal.aborted) this.#controller.abort(new LockLostError(reason));
  }
}

/** `promise`, or a rejection at `deadline` if it is not settled by then. */
function cutOffAt<T>(promise: Promise<T>, deadline: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const cutOff = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error("the renewal was still unanswered at the safe deadline")), Math.max(0, deadline - now()));
  });
  return Promise.race([promise, cutOff]).finally(() => clearTimeout(timer));
}

