/**
 * Errors: one class per error code of the leasehold HTTP API
 * (`docs/openapi.json`, `ErrorCode`), all under {@link LeaseholdError}.
 *
 * Every error the cluster answers is `{"error": {"code", "message", ...details}}`:
 * the client throws the class registered for `code`, with the HTTP status and
 * the details (`holder`, `current_token`, `conflicts`, ...) in `details`. A
 * code this version does not know throws {@link ApiError} itself.
 */

/** Every error code the API answers, each with exactly one HTTP status. */
export type ErrorCode =
  | "invalid_argument" | "unauthenticated" | "permission_denied" | "not_found" | "not_held"
  | "no_record" | "no_snapshot" | "not_member" | "session_not_found" | "method_not_allowed"
  | "request_timeout" | "held" | "lock_delayed" | "reserved" | "stale_token" | "wait_timeout"
  | "lock_mismatch" | "held_under_session" | "seq_too_old" | "seq_reused" | "request_id_reused"
  | "already_initialized" | "would_lose_quorum" | "body_too_large" | "unsupported_media_type"
  | "internal" | "unavailable" | "not_leader" | "overloaded" | "tls_required" | "full"
  | "no_semaphore" | "deadlock" | "semaphore_full" | "limit_mismatch" | "no_leader" | "compacted"
  | "no_user" | "no_role" | "no_token" | "already_exists";

/** Every error this client throws. */
export class LeaseholdError extends Error {
  override name = "LeaseholdError";
}

/**
 * An error answer of the cluster: `status` is its HTTP status, or `null` for
 * an error the client raised itself before or instead of an answer (no node
 * reachable within the retry budget, an argument refused before sending).
 */
export class ApiError extends LeaseholdError {
  override name = "ApiError";
  constructor(
    message: string,
    readonly code: ErrorCode | string,
    readonly status: number | null,
    readonly details: Readonly<Record<string, unknown>> = {},
  ) {
    super(message);
  }
}

export class InvalidArgumentError extends ApiError { override name = "InvalidArgumentError"; }
export class TlsRequiredError extends ApiError { override name = "TlsRequiredError"; }
export class UnauthenticatedError extends ApiError { override name = "UnauthenticatedError"; }
export class PermissionDeniedError extends ApiError { override name = "PermissionDeniedError"; }
export class NotFoundError extends ApiError { override name = "NotFoundError"; }
/** The lock is not held (by anyone, or under this token's grant any more). */
export class NotHeldError extends ApiError { override name = "NotHeldError"; }
export class NoRecordError extends ApiError { override name = "NoRecordError"; }
export class NoSnapshotError extends ApiError { override name = "NoSnapshotError"; }
export class NotMemberError extends ApiError { override name = "NotMemberError"; }
/** The session has ended (expired or deleted): every lock under it is gone. */
export class SessionNotFoundError extends ApiError { override name = "SessionNotFoundError"; }
export class MethodNotAllowedError extends ApiError { override name = "MethodNotAllowedError"; }
export class RequestTimeoutError extends ApiError { override name = "RequestTimeoutError"; }
/** Another owner holds the lock (`details.holder`; `details.conflicts` for a multi-lock). */
export class HeldError extends ApiError { override name = "HeldError"; }
export class LockDelayedError extends ApiError { override name = "LockDelayedError"; }
export class ReservedError extends ApiError { override name = "ReservedError"; }
/** The token is not the current one (`details.current_token`): a newer holder exists. */
export class StaleTokenError extends ApiError { override name = "StaleTokenError"; }
/** A waiting acquire was not granted within its wait. */
export class WaitTimeoutError extends ApiError { override name = "WaitTimeoutError"; }
export class LockMismatchError extends ApiError { override name = "LockMismatchError"; }
export class HeldUnderSessionError extends ApiError { override name = "HeldUnderSessionError"; }
export class SeqTooOldError extends ApiError { override name = "SeqTooOldError"; }
export class SeqReusedError extends ApiError { override name = "SeqReusedError"; }
export class RequestIdReusedError extends ApiError { override name = "RequestIdReusedError"; }
export class AlreadyInitializedError extends ApiError { override name = "AlreadyInitializedError"; }
export class WouldLoseQuorumError extends ApiError { override name = "WouldLoseQuorumError"; }
export class BodyTooLargeError extends ApiError { override name = "BodyTooLargeError"; }
export class UnsupportedMediaTypeError extends ApiError { override name = "UnsupportedMediaTypeError"; }
export class InternalError extends ApiError { override name = "InternalError"; }
/** No such semaphore (nobody holds or waits for it). */
export class NoSemaphoreError extends ApiError { override name = "NoSemaphoreError"; }
/** Waiting would close a cycle of waiters (`details.cycle`): refused at once. */
export class DeadlockError extends ApiError { override name = "DeadlockError"; }
/** No permit of the semaphore is free, and the acquire does not wait. */
export class SemaphoreFullError extends ApiError { override name = "SemaphoreFullError"; }
/** The semaphore exists with another limit. */
export class LimitMismatchError extends ApiError { override name = "LimitMismatchError"; }
/** The election has no leader. */
export class NoLeaderError extends ApiError { override name = "NoLeaderError"; }
/** An event stream was asked to resume before the node's history (`details.compacted_before`). */
export class CompactedError extends ApiError { override name = "CompactedError"; }
/** No such user (`details.user`). */
export class NoUserError extends ApiError { override name = "NoUserError"; }
/** No such role (`details.role`). */
export class NoRoleError extends ApiError { override name = "NoRoleError"; }
/** The user has no token with this id (`details.token_id`). */
export class NoTokenError extends ApiError { override name = "NoTokenError"; }
/** A user or role of that name exists already (`details.what`, `details.name`). */
export class AlreadyExistsError extends ApiError { override name = "AlreadyExistsError"; }
/** A cluster limit is reached (leases, waiters, sessions, records...). */
export class FullError extends ApiError { override name = "FullError"; }
/**
 * No usable answer within the retry budget: no leader, nodes unreachable,
 * or 503 until the end. `status` is 503 when the last answer was one, `null`
 * when no node answered at all.
 */
export class UnavailableError extends ApiError { override name = "UnavailableError"; }
export class NotLeaderError extends UnavailableError { override name = "NotLeaderError"; }
export class OverloadedError extends UnavailableError { override name = "OverloadedError"; }

/** An answer that breaks the API: not JSON, too long, the wrong shape. */
export class DecodeError extends LeaseholdError {
  override name = "DecodeError";
}

type ApiErrorClass = new (
  message: string,
  code: string,
  status: number | null,
  details?: Readonly<Record<string, unknown>>,
) => ApiError;

const BY_CODE: Readonly<Record<ErrorCode, ApiErrorClass>> = {
  invalid_argument: InvalidArgumentError,
  tls_required: TlsRequiredError,
  unauthenticated: UnauthenticatedError,
  permission_denied: PermissionDeniedError,
  not_found: NotFoundError,
  not_held: NotHeldError,
  no_record: NoRecordError,
  no_snapshot: NoSnapshotError,
  not_member: NotMemberError,
  session_not_found: SessionNotFoundError,
  method_not_allowed: MethodNotAllowedError,
  request_timeout: RequestTimeoutError,
  held: HeldError,
  lock_delayed: LockDelayedError,
  reserved: ReservedError,
  stale_token: StaleTokenError,
  wait_timeout: WaitTimeoutError,
  lock_mismatch: LockMismatchError,
  held_under_session: HeldUnderSessionError,
  seq_too_old: SeqTooOldError,
  seq_reused: SeqReusedError,
  request_id_reused: RequestIdReusedError,
  already_initialized: AlreadyInitializedError,
  would_lose_quorum: WouldLoseQuorumError,
  body_too_large: BodyTooLargeError,
  unsupported_media_type: UnsupportedMediaTypeError,
  internal: InternalError,
  full: FullError,
  unavailable: UnavailableError,
  not_leader: NotLeaderError,
  overloaded: OverloadedError,
  no_semaphore: NoSemaphoreError,
  deadlock: DeadlockError,
  semaphore_full: SemaphoreFullError,
  limit_mismatch: LimitMismatchError,
  no_leader: NoLeaderError,
  compacted: CompactedError,
  no_user: NoUserError,
  no_role: NoRoleError,
  no_token: NoTokenError,
  already_exists: AlreadyExistsError,
};

/** The error codes this version knows. */
export const ERROR_CODES: readonly ErrorCode[] = Object.keys(BY_CODE) as ErrorCode[];

/** The error of an answer with `status` and body `text`. */
export function errorFromAnswer(status: number, text: string): ApiError {
  let detail: Record<string, unknown> = {};
  try {
    const parsed: unknown = JSON.parse(text);
    const error = typeof parsed === "object" && parsed !== null ? (parsed as { error?: unknown }).error : undefined;
    if (typeof error === "object" && error !== null) {
      detail = error as Record<string, unknown>;
    }
  } catch {
    // Not JSON (a proxy's page): the status alone tells what it is.
  }
  const code = typeof detail["code"] === "string" ? detail["code"] : `http_${status}`;
  const message = typeof detail["message"] === "string" ? detail["message"] : text.slice(0, 200);
  const { code: _code, message: _message, ...details } = detail;
  const known = Object.hasOwn(BY_CODE, code) ? BY_CODE[code as ErrorCode] : ApiError;
  return new known(`${status} ${code}: ${message}`, code, status, details);
}

/** An error the client raises itself, with no HTTP status. */
export function clientSide(cls: ApiErrorClass, code: ErrorCode, message: string): ApiError {
  return new cls(message, code, null);
}
