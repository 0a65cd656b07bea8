package leasehold

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"
)

// LockOptions say how to acquire and keep a Lock.
type LockOptions struct {
	// Owner is the holder's identity, unique per holder (two holders with
	// one owner share the lock); DefaultOwner() when empty.
	Owner string
	// TTL is the lease's time to live, sent as whole milliseconds (the
	// cluster accepts 3 s to 1 h). The watchdog renews every TTL/3.
	TTL time.Duration
	// Wait is how long to wait in the lock's queue when another owner holds
	// it; zero fails at once with ErrHeld.
	Wait time.Duration
	// DriftMargin is subtracted from every lease to cover clock-rate drift
	// between this machine and the leader (see the package docs); zero
	// means TTL/10, NoDriftMargin means none. At most TTL/2.
	DriftMargin time.Duration
}

// NoDriftMargin asks for no drift margin at all (tests; not for production).
const NoDriftMargin time.Duration = -1

func (o LockOptions) driftMargin() time.Duration {
	return driftMarginOf(o.DriftMargin, wholeTTL(o.TTL))
}

func driftMarginOf(asked, ttl time.Duration) time.Duration {
	switch {
	case asked == NoDriftMargin:
		return 0
	case asked == 0:
		return defaultDriftMargin(ttl)
	default:
		return asked
	}
}

// wholeTTL is ttl cut to whole milliseconds, as the cluster takes it.
func wholeTTL(ttl time.Duration) time.Duration {
	return ttl.Truncate(time.Millisecond)
}

// DefaultOwner is a fresh owner id, "hostname-pid-random", different for
// every call.
func DefaultOwner() string {
	host, err := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r > ' ' && r < 0x7f {
			return r
		}
		return -1
	}, host)
	if err != nil || host == "" {
		host = "host"
	}
	if len(host) > 64 {
		host = host[:64]
	}
	random := make([]byte, 8)
	_, _ = rand.Read(random)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(random))
}

// Lock is a held lock whose watchdog goroutine renews its lease every
// ttl/3.
//
// Pass Token with every write to the protected resource and stop acting
// when Done closes (or check Err before each action). AtRisk says renewals
// are failing: finish or stop early. Release gives the lock up; a Lock that
// is dropped without Release keeps being renewed until the process exits,
// so always Release it (defer lock.Release(ctx)).
type Lock struct {
	client *Client
	name   string
	owner  string
	token  FencingToken
	ttl    time.Duration
	dog    *watchdog
}

// Lock acquires name (waiting in its queue up to options.Wait) and starts
// the watchdog. Errors as Acquire, and an error before anything is sent for
// a TTL under 1 ms or a drift margin over TTL/2.
//
// When the acquire took so long (a queue wait, retries) that less than a
// renewal interval is left before the safe deadline, it renews once before
// returning, to re-anchor the lease; if that fails, its error is returned
// and the lease runs out after its ttl.
func (c *Client) Lock(ctx context.Context, name string, options LockOptions) (*Lock, error) {
	requested := wholeTTL(options.TTL)
	t, err := newTiming(requested, options.driftMargin())
	if err != nil {
		return nil, err
	}
	if options.Owner == "" {
		options.Owner = DefaultOwner()
	}
	lease, err := c.Acquire(ctx, name, options.Owner, requested, &AcquireOptions{Wait: options.Wait})
	if err != nil {
		return nil, err
	}
	// The shorter of what was asked and what was granted; a shorter grant
	// only brings the deadline closer.
	if granted := time.Duration(lease.TTLMs) * time.Millisecond; granted < t.ttl {
		t.ttl = granted
	}
	anchor := lease.SentAt
	if t.deadline(anchor).Before(time.Now().Add(t.interval())) {
		renewed, err := c.Renew(ctx, name, lease.Token, requested)
		if err != nil {
			return nil, err
		}
		if renewed.Token != lease.Token {
			return nil, fmt.Errorf("leasehold: the renewal of token %d answered token %d", lease.Token, renewed.Token)
		}
		anchor = renewed.SentAt
	}
	renew := func(ctx context.Context) (time.Time, error) {
		renewed, err := c.Renew(ctx, name, lease.Token, requested)
		if err != nil {
			return time.Time{}, revokedBy(err, CodeStaleToken, CodeNotHeld)
		}
		if renewed.Token != lease.Token {
			return time.Time{}, &LostError{Reason: Revoked, Code: CodeStaleToken, Message: fmt.Sprintf("the renewal answered token %d", renewed.Token)}
		}
		return renewed.SentAt, nil
	}
	return &Lock{client: c, name: name, owner: options.Owner, token: lease.Token, ttl: t.ttl, dog: startWatchdog(renew, t, anchor)}, nil
}

// Token is the fencing token of this grant: send it with every write.
func (l *Lock) Token() FencingToken { return l.token }

// Name is the lock's name.
func (l *Lock) Name() string { return l.name }

// Owner is the owner the lock is held as.
func (l *Lock) Owner() string { return l.owner }

// TTL is the lease's ttl, as granted.
func (l *Lock) TTL() time.Duration { return l.ttl }

// ValidUntil is the current safe deadline: until this instant the cluster
// cannot have expired the lease. It only moves forward, and stops moving
// once the lock is lost.
func (l *Lock) ValidUntil() time.Time { return l.dog.validUntil() }

// Done is closed when the lock is lost (Err says why), no later than the
// safe deadline, or when it is released.
func (l *Lock) Done() <-chan struct{} { return l.dog.done }

// Err is nil while the lock is safe, and a *LostError once Done is closed
// or the safe deadline has passed.
func (l *Lock) Err() error { return l.dog.err() }

// AtRisk is true while renewals fail or are overdue, until one succeeds or
// the lock is lost.
func (l *Lock) AtRisk() bool { return l.dog.atRisk() }

// Release stops the watchdog, then releases the lock on the cluster (Done
// closes with Ended). Errors are the cluster's (ErrStaleToken or ErrNotHeld
// when the lock was already lost) or unavailability, in which case the
// lease runs out after its ttl.
func (l *Lock) Release(ctx context.Context) error {
	l.dog.halt()
	return l.client.Release(ctx, l.name, l.token)
}
