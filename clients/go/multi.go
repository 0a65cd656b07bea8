package leasehold

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Leases are locks granted together, in one log entry, under one token.
type Leases struct {
	// Grants, one per lock, in the order asked, all under Token.
	Grants []Grant      `json:"grants"`
	Token  FencingToken `json:"token"`
	// Reacquired: the owner already held all of them under this token
	// (leases restarted).
	Reacquired bool `json:"reacquired"`
	// SentAt is the instant the call started: the anchor of every lease.
	SentAt time.Time `json:"-"`
}

// Names are the names of the locks, in the order asked.
func (l *Leases) Names() []string {
	names := make([]string, len(l.Grants))
	for i, g := range l.Grants {
		names[i] = g.Name
	}
	return names
}

// ValidUntil is when the holder must stop acting on these leases (they
// share one ttl): as Lease.ValidUntil, and not for leases under a session.
func (l *Leases) ValidUntil(margin time.Duration) time.Time {
	var ttl uint64
	for i, g := range l.Grants {
		if i == 0 || g.TTLMs < ttl {
			ttl = g.TTLMs
		}
	}
	return safeDeadline(l.SentAt, time.Duration(ttl)*time.Millisecond, margin)
}

type multiAcquireRequest struct {
	Names []string `json:"names"`
	acquireRequest
}

// AcquireMany takes every lock of names (1–64 distinct) for owner in one
// log entry, under one token, or none: ErrHeld, whose "conflicts" detail
// names every lock in the way. With options.Wait it waits until all can be
// granted together, holding none meanwhile.
func (c *Client) AcquireMany(ctx context.Context, names []string, owner string, ttl time.Duration, options *AcquireOptions) (*Leases, error) {
	if wholeMs(ttl) == 0 {
		return nil, errors.New("leasehold: the ttl must be at least 1 ms")
	}
	return c.acquireManyFor(ctx, names, owner, lifetime{ttlMs: wholeMs(ttl)}, options)
}

func (c *Client) acquireManyFor(ctx context.Context, names []string, owner string, life lifetime, options *AcquireOptions) (*Leases, error) {
	body := multiAcquireRequest{Names: names, acquireRequest: life.fill(owner, options)}
	var leases Leases
	sentAt, err := c.call(ctx, http.MethodPost, "/v1/multi/acquire", body, options.wait(), &leases)
	if err != nil {
		return nil, err
	}
	leases.SentAt = sentAt
	return &leases, nil
}

// ReleaseMany releases every lock of names, all held under token, in one
// log entry, or none (ErrNotHeld, ErrStaleToken for the first that is not).
func (c *Client) ReleaseMany(ctx context.Context, names []string, token FencingToken) error {
	body := struct {
		Names     []string     `json:"names"`
		Token     FencingToken `json:"token"`
		RequestID string       `json:"request_id"`
	}{names, token, NewRequestID()}
	_, err := c.call(ctx, http.MethodPost, "/v1/multi/release", body, 0, nil)
	return err
}

// LockSet is locks held together under one token until Release.
//
// No watchdog renews them: a set is for work that fits in its ttl (check
// Leases.ValidUntil); for longer work take the set under a Session
// (Session.LockMany), whose one watchdog keeps every lock of it.
type LockSet struct {
	client *Client
	Leases
}

// LockMany acquires every lock of names as AcquireMany does, and returns
// the guard that releases them together.
func (c *Client) LockMany(ctx context.Context, names []string, owner string, ttl time.Duration, options *AcquireOptions) (*LockSet, error) {
	leases, err := c.AcquireMany(ctx, names, owner, ttl, options)
	if err != nil {
		return nil, err
	}
	return &LockSet{client: c, Leases: *leases}, nil
}

// Release releases every lock of the set in one log entry.
func (s *LockSet) Release(ctx context.Context) error {
	return s.client.ReleaseMany(ctx, s.Names(), s.Token)
}
