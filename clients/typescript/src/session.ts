/**
 * {@link Session}: any number of locks kept by one session, which one
 * watchdog keeps alive with a keepalive every `ttl / 3`; one loss for all
 * of them. Closing the session releases every lock under it in one entry.
 */

import * as calls from "./calls.js";
import { SessionNotFoundError } from "./errors.js";
import { DEFAULT_TTL_MS, Guarded, defaultOwner } from "./lock.js";
import { now, type Transport } from "./transport.js";
import { Timing, Watchdog } from "./watchdog.js";
import type { Lease, Leases } from "./types.js";

export interface SessionOptions {
  /** The owner every lock under the session is taken as. Default: {@link defaultOwner}. */
  readonly owner?: string;
  /** The session's ttl (ms, whole; 3 s to 1 h). Default 10 s. */
  readonly ttlMs?: number;
  /** As {@link LockOptions.driftMarginMs}. */
  readonly driftMarginMs?: number;
}

/**
 * An open session. Its locks live exactly as long as it does: stop acting
 * under any of them when {@link signal} aborts. Close it with `await using`
 * or {@link close}.
 */
export class Session extends Guarded implements AsyncDisposable {
  protected readonly watchdog: Watchdog;
  /** Numbers the session's requests, so a retried one is applied once. */
  #seq = 0;
  #closed = false;

  private constructor(
    private readonly transport: Transport,
    readonly id: number,
    readonly owner: string,
    watchdog: Watchdog,
  ) {
    super();
    this.watchdog = watchdog;
  }

  /** Creates the session and starts its watchdog (`FullError` at the cluster's session limit). */
  static async open(transport: Transport, options: SessionOptions = {}): Promise<Session> {
    const requested = Timing.of(options.ttlMs ?? DEFAULT_TTL_MS, options.driftMarginMs);
    const owner = options.owner ?? defaultOwner();
    const started = now();
    const view = await calls.createSession(transport, owner, requested.ttlMs);
    const timing = new Timing(Math.min(requested.ttlMs, view.ttlMs), requested.driftMarginMs);
    // The keepalive numbers its requests in the same sequence as the locks.
    let session: Session | undefined;
    const renewal = {
      subject: `session ${view.session}`,
      endedBy: ["session_not_found"],
      renew: async (deadline: number): Promise<number> =>
        (await calls.keepAlive(transport, view.session, session === undefined ? undefined : session.#nextSeq(), deadline)).sentAt,
    };
    session = new Session(transport, view.session, owner, new Watchdog(renewal, timing, Math.min(started, view.sentAt)));
    return session;
  }

  #nextSeq(): number {
    this.#seq += 1;
    return this.#seq;
  }

  /**
   * Acquires `name` under the session, waiting in its queue up to `waitMs`.
   * The lock lasts as long as the session (its safe deadline is
   * {@link validUntil}); `SessionNotFoundError` once the session has ended,
   * which also signals the loss.
   */
  async lock(name: string, options: { readonly waitMs?: number } = {}): Promise<Lease> {
    return this.#underIt(() => calls.acquire(this.transport, name, this.owner, { session: this.id, seq: this.#nextSeq() }, options));
  }

  /** Acquires every lock of `names` under the session in one entry, under one token, or none. */
  async lockMany(names: readonly string[], options: { readonly waitMs?: number } = {}): Promise<Leases> {
    return this.#underIt(() => calls.acquireMany(this.transport, names, this.owner, { session: this.id, seq: this.#nextSeq() }, options));
  }

  async #underIt<T>(request: () => Promise<T>): Promise<T> {
    try {
      return await request();
    } catch (e) {
      if (e instanceof SessionNotFoundError) this.watchdog.revoked(e.code, e.message);
      throw e;
    }
  }

  /**
   * Stops the watchdog and deletes the session, releasing every lock under
   * it; answers their names. Throws the cluster's error
   * (`SessionNotFoundError` when it had already ended) or `UnavailableError`
   * (the session then runs out after its ttl).
   */
  async close(): Promise<string[]> {
    this.#closed = true;
    await this.watchdog.stop();
    return calls.deleteSession(this.transport, this.id);
  }

  /** Closes on leaving an `await using` block; a session already known lost is not an error. */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#closed) return;
    const lost = this.isLost;
    try {
      await this.close();
    } catch (e) {
      if (!(lost && e instanceof SessionNotFoundError)) throw e;
    }
  }
}
