package leasehold

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// FencingToken is the index of the log entry that granted a lock: strictly
// increasing per lock name. Pass it with every write to the resource.
type FencingToken uint64

// SessionID is a session's id: the index of the log entry that created it.
type SessionID uint64

// Grant is the cluster's answer to an acquire or a renew.
type Grant struct {
	Name         string       `json:"name"`
	Owner        string       `json:"owner"`
	Token        FencingToken `json:"token"`
	TTLMs        uint64       `json:"ttl_ms"`
	ExpiresInMs  uint64       `json:"expires_in_ms"`
	DeadlineTick uint64       `json:"deadline_tick"`
	// Reacquired (acquire only): the owner already held the lock; same
	// token, lease restarted.
	Reacquired bool `json:"reacquired,omitempty"`
	// Session is set for a lock held under a session.
	Session *SessionID `json:"session,omitempty"`
}

// Lease is a grant with the instant its call started, on this process's
// monotonic clock: the anchor of the lease (no later than the send of the
// call's first attempt).
type Lease struct {
	Grant
	SentAt time.Time
}

// ValidUntil is the instant until which the holder may act on this lease:
// SentAt + ttl − margin. The cluster cannot expire it earlier; margin
// covers drift between this machine's clock and the leader's. Not for a
// lease under a session, which lasts as long as the session (see
// Session.ValidUntil).
func (l *Lease) ValidUntil(margin time.Duration) time.Time {
	return safeDeadline(l.SentAt, time.Duration(l.TTLMs)*time.Millisecond, margin)
}

// LeaseView is a held lock as GET /v1/locks/{name} shows it.
type LeaseView struct {
	Name         string       `json:"name"`
	Owner        string       `json:"owner"`
	Token        FencingToken `json:"token"`
	TTLMs        uint64       `json:"ttl_ms"`
	ExpiresInMs  uint64       `json:"expires_in_ms"`
	DeadlineTick uint64       `json:"deadline_tick"`
	RequestID    string       `json:"request_id,omitempty"`
	Session      *SessionID   `json:"session,omitempty"`
	Waiters      []struct {
		Owner string `json:"owner"`
	} `json:"waiters,omitempty"`
}

// AcquireOptions are the optional parts of an acquire.
type AcquireOptions struct {
	// Wait is how long to wait in the lock's FIFO queue when another owner
	// holds it (the cluster answers wait_timeout when it runs out); zero
	// fails at once with held.
	Wait time.Duration
	// RequestID de-duplicates retries; a fresh one is made when empty.
	RequestID string
	// LockDelay: should the lease expire (not be released), nobody is
	// granted the lock for this long after.
	LockDelay time.Duration
}

// lifetime is what an acquired lease lives by: its own ttl, or a session
// (with the request's number in the session's sequence).
type lifetime struct {
	ttlMs   uint64
	session SessionID
	seq     uint64
}

type acquireRequest struct {
	Owner       string     `json:"owner"`
	TTLMs       uint64     `json:"ttl_ms,omitempty"`
	Session     *SessionID `json:"session,omitempty"`
	Seq         uint64     `json:"seq,omitempty"`
	WaitMs      uint64     `json:"wait_ms,omitempty"`
	RequestID   string     `json:"request_id"`
	LockDelayMs uint64     `json:"lock_delay_ms,omitempty"`
}

func (a *AcquireOptions) requestID() string {
	if a != nil && a.RequestID != "" {
		return a.RequestID
	}
	return NewRequestID()
}

func (a *AcquireOptions) wait() time.Duration {
	if a == nil {
		return 0
	}
	return a.Wait
}

func (a *AcquireOptions) lockDelay() time.Duration {
	if a == nil {
		return 0
	}
	return a.LockDelay
}

func (l lifetime) fill(owner string, options *AcquireOptions) acquireRequest {
	request := acquireRequest{
		Owner:       owner,
		TTLMs:       l.ttlMs,
		WaitMs:      wholeMs(options.wait()),
		RequestID:   options.requestID(),
		LockDelayMs: wholeMs(options.lockDelay()),
	}
	if l.session != 0 {
		session := l.session
		request.Session = &session
		request.Seq = l.seq
	}
	return request
}

// Acquire takes name for owner with a lease of ttl (whole milliseconds,
// 3 s to 1 h), waiting in its queue when options ask to. Errors: ErrHeld
// (without a wait), ErrWaitTimeout, ErrLockDelayed, ErrRequestIDReused,
// ErrFull, ErrInvalidArgument, *UnavailableError.
func (c *Client) Acquire(ctx context.Context, name, owner string, ttl time.Duration, options *AcquireOptions) (*Lease, error) {
	if wholeMs(ttl) == 0 {
		return nil, errors.New("leasehold: the ttl must be at least 1 ms")
	}
	return c.acquireFor(ctx, name, owner, lifetime{ttlMs: wholeMs(ttl)}, options)
}

func (c *Client) acquireFor(ctx context.Context, name, owner string, life lifetime, options *AcquireOptions) (*Lease, error) {
	var lease Lease
	path := "/v1/locks/" + segment(name) + "/acquire"
	sentAt, err := c.call(ctx, http.MethodPost, path, life.fill(owner, options), options.wait(), &lease.Grant)
	if err != nil {
		return nil, err
	}
	lease.SentAt = sentAt
	return &lease, nil
}

// Renew restarts the lease held under token, with ttl (zero: the grant's
// ttl). Errors: ErrStaleToken, ErrNotHeld, ErrHeldUnderSession.
func (c *Client) Renew(ctx context.Context, name string, token FencingToken, ttl time.Duration) (*Lease, error) {
	body := struct {
		Token     FencingToken `json:"token"`
		TTLMs     uint64       `json:"ttl_ms,omitempty"`
		RequestID string       `json:"request_id"`
	}{token, wholeMs(ttl), NewRequestID()}
	var lease Lease
	sentAt, err := c.call(ctx, http.MethodPost, "/v1/locks/"+segment(name)+"/renew", body, 0, &lease.Grant)
	if err != nil {
		return nil, err
	}
	lease.SentAt = sentAt
	return &lease, nil
}

// Release frees the lock held under token (handing it to its first
// waiter). Errors: ErrStaleToken, ErrNotHeld.
func (c *Client) Release(ctx context.Context, name string, token FencingToken) error {
	body := struct {
		Token     FencingToken `json:"token"`
		RequestID string       `json:"request_id"`
	}{token, NewRequestID()}
	_, err := c.call(ctx, http.MethodPost, "/v1/locks/"+segment(name)+"/release", body, 0, nil)
	return err
}

// Get reads the lease of name (linearizable); nil when the lock is free.
func (c *Client) Get(ctx context.Context, name string) (*LeaseView, error) {
	var view LeaseView
	_, err := c.call(ctx, http.MethodGet, "/v1/locks/"+segment(name), nil, 0, &view)
	if errors.Is(err, ErrNotHeld) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &view, nil
}

// List returns held locks whose names start with prefix, at most limit.
func (c *Client) List(ctx context.Context, prefix string, limit int) ([]LeaseView, error) {
	var listed struct {
		Locks []LeaseView `json:"locks"`
	}
	query := url.Values{"prefix": {prefix}, "limit": {strconv.Itoa(limit)}}
	_, err := c.call(ctx, http.MethodGet, "/v1/locks?"+query.Encode(), nil, 0, &listed)
	return listed.Locks, err
}
