/**
 * What the cluster answers, as the client hands it out. Tokens are numbers:
 * a fencing token is the index of a Raft log entry, far below 2^53.
 * Durations are whole milliseconds; `sentAt` is on `performance.now()`.
 */

/** A grant or renewal of one lock, with the send time of its request. */
export interface Lease {
  readonly name: string;
  readonly owner: string;
  /** The fencing token: send it with every write to the protected resource. */
  readonly token: number;
  readonly ttlMs: number;
  /** Real time the lease is guaranteed to last from the commit of its entry. */
  readonly expiresInMs: number;
  /** The owner already held the lock under this token (the lease restarted). */
  readonly reacquired: boolean;
  /**
   * Send time of the call's first attempt (`performance.now()`): the anchor
   * of the lease. A retry may be answered from the request id of an earlier
   * attempt, whose commit came after the first send, never before.
   */
  readonly sentAt: number;
}

/** Locks granted together by one multi-acquire, under one token. */
export interface Leases {
  readonly token: number;
  /** One grant per lock, in the order asked. */
  readonly grants: readonly Lease[];
  readonly reacquired: boolean;
  readonly sentAt: number;
}

/** A lock as `get` shows it. */
export interface LeaseView {
  readonly name: string;
  readonly owner: string;
  readonly token: number;
  readonly ttlMs: number;
  readonly expiresInMs: number;
  /** The session the lease lives by, if any. */
  readonly session: number | null;
}

/** A session as the cluster answers it. */
export interface SessionView {
  /** The session's id: the index of the log entry that created it. */
  readonly session: number;
  readonly owner: string;
  readonly ttlMs: number;
  readonly expiresInMs: number;
  readonly sentAt: number;
}

/** A fenced record. */
export interface LeaseholdRecord {
  readonly key: string;
  readonly value: unknown;
  /** The lock whose holder wrote it, and the holder's token. */
  readonly lock: string;
  readonly token: number;
  /** Index of the log entry that wrote it. */
  readonly index: number;
}
