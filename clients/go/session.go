package leasehold

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// A session is one liveness deadline for any number of locks: its Session
// guard sends one keepalive every ttl/3 whatever it holds, and its one Done
// speaks for all of them. Every acquire and keepalive of a session carries
// the next number of the session's sequence (seq), the same on each retry
// of one call: the cluster answers a retry it has applied from the
// session's memory, for the session's whole life.

// SessionView is a session as the cluster shows it.
type SessionView struct {
	Session      SessionID `json:"session"`
	Owner        string    `json:"owner"`
	TTLMs        uint64    `json:"ttl_ms"`
	ExpiresInMs  uint64    `json:"expires_in_ms"`
	DeadlineTick uint64    `json:"deadline_tick"`
	LockCount    uint64    `json:"lock_count"`
	WaitingCount uint64    `json:"waiting_count"`
	// Locks (GET of one session only): the locks it holds.
	Locks []struct {
		Name  string       `json:"name"`
		Token FencingToken `json:"token"`
	} `json:"locks,omitempty"`
}

// CreateSession opens a session (POST /v1/sessions) and returns it with the
// instant the call started (the anchor of its deadline). Errors: ErrFull,
// ErrInvalidArgument.
func (c *Client) CreateSession(ctx context.Context, owner string, ttl time.Duration) (*SessionView, time.Time, error) {
	body := struct {
		Owner     string `json:"owner"`
		TTLMs     uint64 `json:"ttl_ms"`
		RequestID string `json:"request_id"`
	}{owner, wholeMs(ttl), NewRequestID()}
	var view SessionView
	sentAt, err := c.call(ctx, http.MethodPost, "/v1/sessions", body, 0, &view)
	if err != nil {
		return nil, sentAt, err
	}
	return &view, sentAt, nil
}

// KeepAlive restarts a session's deadline; seq is the request's number in
// the session's sequence, 0 for none. Errors: ErrSessionNotFound.
func (c *Client) KeepAlive(ctx context.Context, session SessionID, seq uint64) (*SessionView, time.Time, error) {
	body := struct {
		RequestID string `json:"request_id"`
		Seq       uint64 `json:"seq,omitempty"`
	}{NewRequestID(), seq}
	var view SessionView
	sentAt, err := c.call(ctx, http.MethodPost, "/v1/sessions/"+sessionPath(session)+"/keepalive", body, 0, &view)
	if err != nil {
		return nil, sentAt, err
	}
	return &view, sentAt, nil
}

// DeleteSession ends a session, releasing every lock under it; returns the
// names released. Errors: ErrSessionNotFound.
func (c *Client) DeleteSession(ctx context.Context, session SessionID) ([]string, error) {
	var deleted struct {
		Released []string `json:"released"`
	}
	// A request id, like every mutation: a retry after a lost answer (the
	// session already deleted) gets the first answer again, not a 404.
	path := "/v1/sessions/" + sessionPath(session) + "?request_id=" + NewRequestID()
	_, err := c.call(ctx, http.MethodDelete, path, nil, 0, &deleted)
	return deleted.Released, err
}

// GetSession reads a session with its locks; nil when it is gone.
func (c *Client) GetSession(ctx context.Context, session SessionID) (*SessionView, error) {
	var view SessionView
	_, err := c.call(ctx, http.MethodGet, "/v1/sessions/"+sessionPath(session), nil, 0, &view)
	if errors.Is(err, ErrSessionNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &view, nil
}

func sessionPath(session SessionID) string {
	return strconv.FormatUint(uint64(session), 10)
}

// SessionOptions say how to open and keep a Session.
type SessionOptions struct {
	// Owner is the owner every lock under the session is taken as;
	// DefaultOwner() when empty.
	Owner string
	// TTL is the session's ttl, whole milliseconds (3 s to 1 h).
	TTL time.Duration
	// DriftMargin as LockOptions.DriftMargin: zero means TTL/10.
	DriftMargin time.Duration
}

// Session is a live session kept alive by a watchdog goroutine; locks taken
// with its Lock and LockMany live as long as it does.
//
// Stop acting under any of its locks when Done closes; pass each lock's
// token with every write. Close deletes the session, releasing its locks.
type Session struct {
	client *Client
	id     SessionID
	owner  string
	ttl    time.Duration
	dog    *watchdog
	// seq is the last number of the session's sequence sent, shared with
	// the watchdog's keepalives.
	seq atomic.Uint64
}

// OpenSession opens a session and starts its keepalive watchdog.
func (c *Client) OpenSession(ctx context.Context, options SessionOptions) (*Session, error) {
	ttl := wholeTTL(options.TTL)
	t, err := newTiming(ttl, driftMarginOf(options.DriftMargin, ttl))
	if err != nil {
		return nil, err
	}
	if options.Owner == "" {
		options.Owner = DefaultOwner()
	}
	view, sentAt, err := c.CreateSession(ctx, options.Owner, ttl)
	if err != nil {
		return nil, err
	}
	s := &Session{client: c, id: view.Session, owner: options.Owner, ttl: ttl}
	keepAlive := func(ctx context.Context) (time.Time, error) {
		_, sentAt, err := c.KeepAlive(ctx, s.id, s.seq.Add(1))
		return sentAt, revokedBy(err, CodeSessionNotFound)
	}
	s.dog = startWatchdog(keepAlive, t, sentAt)
	return s, nil
}

// ID is the session's id.
func (s *Session) ID() SessionID { return s.id }

// Owner is the owner its locks are held as.
func (s *Session) Owner() string { return s.owner }

// ValidUntil: until this instant the cluster cannot have ended the
// session, nor any lock held under it.
func (s *Session) ValidUntil() time.Time { return s.dog.validUntil() }

// Done is closed when the session, and with it every lock under it, is
// lost (Err says why), or when it is closed.
func (s *Session) Done() <-chan struct{} { return s.dog.done }

// Err is nil while the session is safe, a *LostError once Done is closed
// or the safe deadline has passed.
func (s *Session) Err() error { return s.dog.err() }

// AtRisk is true while keepalives fail or are overdue, until one succeeds
// or the session is lost.
func (s *Session) AtRisk() bool { return s.dog.atRisk() }

// Lock acquires name under the session, waiting in its queue up to wait:
// the lock lives as long as the session. Release it with Client.Release
// and its token. Errors as Client.Acquire, and ErrSessionNotFound once the
// session has ended.
func (s *Session) Lock(ctx context.Context, name string, wait time.Duration) (*Grant, error) {
	life := lifetime{session: s.id, seq: s.seq.Add(1)}
	lease, err := s.client.acquireFor(ctx, name, s.owner, life, &AcquireOptions{Wait: wait})
	if err != nil {
		return nil, err
	}
	return &lease.Grant, nil
}

// LockMany acquires every lock of names under the session in one log
// entry, under one token, or none (as Client.AcquireMany).
func (s *Session) LockMany(ctx context.Context, names []string, wait time.Duration) (*Leases, error) {
	life := lifetime{session: s.id, seq: s.seq.Add(1)}
	return s.client.acquireManyFor(ctx, names, s.owner, life, &AcquireOptions{Wait: wait})
}

// Close stops the watchdog and deletes the session, releasing every lock
// under it (each handed to its first waiter). Errors are the cluster's
// (ErrSessionNotFound when it had already ended) or unavailability, in
// which case the session runs out after its ttl.
func (s *Session) Close(ctx context.Context) ([]string, error) {
	s.dog.halt()
	return s.client.DeleteSession(ctx, s.id)
}
