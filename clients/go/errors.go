package leasehold

import (
	"encoding/json"
	"fmt"
)

// ErrorCode is the cluster's machine-readable error code; each has exactly
// one HTTP status (docs/api.md lists when each is answered).
type ErrorCode string

// The error codes of the API (the ErrorCode enum of docs/openapi.json).
const (
	CodeInvalidArgument      ErrorCode = "invalid_argument"
	CodeUnauthenticated      ErrorCode = "unauthenticated"
	CodePermissionDenied     ErrorCode = "permission_denied"
	CodeNotFound             ErrorCode = "not_found"
	CodeNotHeld              ErrorCode = "not_held"
	CodeNoRecord             ErrorCode = "no_record"
	CodeNoSnapshot           ErrorCode = "no_snapshot"
	CodeNotMember            ErrorCode = "not_member"
	CodeSessionNotFound      ErrorCode = "session_not_found"
	CodeMethodNotAllowed     ErrorCode = "method_not_allowed"
	CodeRequestTimeout       ErrorCode = "request_timeout"
	CodeHeld                 ErrorCode = "held"
	CodeLockDelayed          ErrorCode = "lock_delayed"
	CodeReserved             ErrorCode = "reserved"
	CodeStaleToken           ErrorCode = "stale_token"
	CodeWaitTimeout          ErrorCode = "wait_timeout"
	CodeLockMismatch         ErrorCode = "lock_mismatch"
	CodeHeldUnderSession     ErrorCode = "held_under_session"
	CodeSeqTooOld            ErrorCode = "seq_too_old"
	CodeSeqReused            ErrorCode = "seq_reused"
	CodeRequestIDReused      ErrorCode = "request_id_reused"
	CodeAlreadyInitialized   ErrorCode = "already_initialized"
	CodeWouldLoseQuorum      ErrorCode = "would_lose_quorum"
	CodeBodyTooLarge         ErrorCode = "body_too_large"
	CodeUnsupportedMediaType ErrorCode = "unsupported_media_type"
	CodeInternal             ErrorCode = "internal"
	CodeUnavailable          ErrorCode = "unavailable"
	CodeNotLeader            ErrorCode = "not_leader"
	CodeOverloaded           ErrorCode = "overloaded"
	CodeTLSRequired          ErrorCode = "tls_required"
	CodeFull                 ErrorCode = "full"
	CodeNoSemaphore          ErrorCode = "no_semaphore"
	CodeDeadlock             ErrorCode = "deadlock"
	CodeSemaphoreFull        ErrorCode = "semaphore_full"
	CodeLimitMismatch        ErrorCode = "limit_mismatch"
	CodeNoLeader             ErrorCode = "no_leader"
	CodeCompacted            ErrorCode = "compacted"
	CodeNoUser               ErrorCode = "no_user"
	CodeNoRole               ErrorCode = "no_role"
	CodeNoToken              ErrorCode = "no_token"
	CodeAlreadyExists        ErrorCode = "already_exists"
	// CodeUnknown stands for an answer that was not a leasehold error body
	// (a proxy in between, say); the status is kept.
	CodeUnknown ErrorCode = "unknown"
)

// APIError is the cluster's JSON error answer. errors.Is matches it against
// the sentinels below by code: errors.Is(err, leasehold.ErrHeld).
type APIError struct {
	Status  int
	Code    ErrorCode
	Message string
	// Details holds the error's other fields (holder, token, current_token,
	// conflicts, ...), undecoded.
	Details map[string]json.RawMessage
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// Is matches an APIError with the same code.
func (e *APIError) Is(target error) bool {
	t, ok := target.(*APIError)
	return ok && t.Code == e.Code
}

// Detail decodes the error field name into out; false when it is absent or
// of another shape.
func (e *APIError) Detail(name string, out interface{}) bool {
	raw, ok := e.Details[name]
	return ok && json.Unmarshal(raw, out) == nil
}

// Sentinels for errors.Is, one per error code a lock holder acts on.
var (
	ErrInvalidArgument  = &APIError{Code: CodeInvalidArgument}
	ErrUnauthenticated  = &APIError{Code: CodeUnauthenticated}
	ErrPermissionDenied = &APIError{Code: CodePermissionDenied}
	ErrNotHeld          = &APIError{Code: CodeNotHeld}
	ErrNoRecord         = &APIError{Code: CodeNoRecord}
	ErrSessionNotFound  = &APIError{Code: CodeSessionNotFound}
	ErrHeld             = &APIError{Code: CodeHeld}
	ErrLockDelayed      = &APIError{Code: CodeLockDelayed}
	ErrReserved         = &APIError{Code: CodeReserved}
	ErrStaleToken       = &APIError{Code: CodeStaleToken}
	ErrWaitTimeout      = &APIError{Code: CodeWaitTimeout}
	ErrLockMismatch     = &APIError{Code: CodeLockMismatch}
	ErrHeldUnderSession = &APIError{Code: CodeHeldUnderSession}
	ErrSeqTooOld        = &APIError{Code: CodeSeqTooOld}
	ErrSeqReused        = &APIError{Code: CodeSeqReused}
	ErrRequestIDReused  = &APIError{Code: CodeRequestIDReused}
	ErrFull             = &APIError{Code: CodeFull}
	ErrDeadlock         = &APIError{Code: CodeDeadlock}
)

// UnavailableError: no node gave a usable answer within the retry budget
// (no leader, no quorum, nodes unreachable, 503 until the end). Code and
// Status are those of the last 503 seen, empty when there was none.
type UnavailableError struct {
	Code    ErrorCode
	Status  int
	Message string
}

func (e *UnavailableError) Error() string {
	return "cluster unavailable: " + e.Message
}

// LostReason says why a Lock or Session stopped protecting its holder.
type LostReason string

const (
	// Expired: the safe deadline passed without a successful renewal (no
	// quorum, nodes unreachable or hung, this process paused). The lease may
	// still be held on the cluster, but nothing guarantees it any more.
	Expired LostReason = "expired"
	// Revoked: the cluster answered a renewal with stale_token or not_held
	// (a lock) or session_not_found (a session): it has ended, and another
	// owner may hold the lock.
	Revoked LostReason = "revoked"
	// Ended: the guard was released or closed before anything was lost.
	Ended LostReason = "ended"
)

// LostError is what Lock.Err and Session.Err return once Done is closed.
type LostError struct {
	Reason LostReason
	// Code is the cluster's error code when Reason is Revoked.
	Code    ErrorCode
	Message string
}

func (e *LostError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("lock lost (%s, %s): %s", e.Reason, e.Code, e.Message)
	}
	return fmt.Sprintf("lock lost (%s): %s", e.Reason, e.Message)
}
