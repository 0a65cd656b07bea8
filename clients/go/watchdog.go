package leasehold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The watchdog shared by Lock (which renews one lease) and Session (which
// keeps one session, and so all its locks, alive): what it renews differs,
// the timing and the lost signal do not (as watchdog.rs of the Rust client).
//
// The cluster never expires a lease or a session before ttl of real time has
// passed since the entry that granted or renewed it was committed, and that
// commit comes after the client sent the request. So on this process's
// monotonic clock it is certainly alive until
//
//	anchor + ttl − drift margin
//
// where anchor is the start of the call that produced the last grant or
// renewal (no later than the send of its first attempt, whichever attempt
// the cluster applied) and the drift margin covers the rate difference
// between this machine's clock and the leader's, and the watchdog's own
// scheduling delays. That instant is the safe deadline. The cluster's
// expires_in_ms plays no part: it counts from the commit, which the client
// cannot observe.
//
// The watchdog renews every ttl/3 after the anchor. A failed renewal is
// retried with a short back-off until the safe deadline, and every attempt
// is cut off at that deadline (the client's retry budget does not delay
// it), so Done closes no later than the safe deadline even when every node
// hangs. A renewal the cluster refuses because the lease or session has
// ended closes Done at once.

// First pause after a failed renewal; it doubles up to maxRenewalBackoff.
const (
	initialRenewalBackoff = 50 * time.Millisecond
	maxRenewalBackoff     = 500 * time.Millisecond
)

// renewFunc sends one renewal and returns the anchor it gives (the start of
// its call), or why it failed: a *LostError when the cluster says what was
// renewed has ended.
type renewFunc func(ctx context.Context) (time.Time, error)

// timing is the safe-deadline arithmetic of one ttl.
type timing struct {
	ttl         time.Duration
	driftMargin time.Duration
}

// newTiming refuses a margin over half the ttl (or a negative one): the
// watchdog would have no time left to renew in.
func newTiming(ttl, driftMargin time.Duration) (timing, error) {
	if ttl < time.Millisecond {
		return timing{}, errors.New("leasehold: the ttl must be at least 1 ms")
	}
	if driftMargin < 0 || driftMargin > ttl/2 {
		return timing{}, fmt.Errorf("leasehold: drift margin %v is not between 0 and half the ttl %v", driftMargin, ttl)
	}
	return timing{ttl: ttl, driftMargin: driftMargin}, nil
}

// defaultDriftMargin is ttl/10: far more than the drift of sane hardware
// (well under 1 %), and room for the watchdog's scheduling delays.
func defaultDriftMargin(ttl time.Duration) time.Duration {
	return ttl / 10
}

func (t timing) deadline(anchor time.Time) time.Time {
	return safeDeadline(anchor, t.ttl, t.driftMargin)
}

// interval is the time between an anchor and the next renewal.
func (t timing) interval() time.Duration {
	return t.ttl / 3
}

func safeDeadline(anchor time.Time, ttl, margin time.Duration) time.Time {
	if margin > ttl {
		return anchor
	}
	return anchor.Add(ttl - margin)
}

// watchdog renews in its own goroutine and publishes the safe deadline and
// the lost signal.
type watchdog struct {
	renew  renewFunc
	timing timing

	mu     sync.Mutex
	anchor time.Time
	// failing is set by a failed renewal attempt and cleared by a
	// successful one.
	failing bool
	lost    *LostError
	done    chan struct{}

	stop   context.CancelFunc
	exited chan struct{}
}

func startWatchdog(renew renewFunc, t timing, anchor time.Time) *watchdog {
	ctx, stop := context.WithCancel(context.Background())
	w := &watchdog{renew: renew, timing: t, anchor: anchor, done: make(chan struct{}), stop: stop, exited: make(chan struct{})}
	go w.run(ctx)
	return w
}

// validUntil is the current safe deadline; it only moves forward, and stops
// moving once lost.
func (w *watchdog) validUntil() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.timing.deadline(w.anchor)
}

// err is nil while the lease is safe: once Done is closed it says why, and
// once the safe deadline has passed it says so even if the watchdog has not
// yet closed Done (it does at that moment).
func (w *watchdog) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lost != nil {
		return w.lost
	}
	if !time.Now().Before(w.timing.deadline(w.anchor)) {
		return &LostError{Reason: Expired, Message: "the safe deadline has passed"}
	}
	return nil
}

// atRisk is true while the lease is still safe but renewals are in trouble
// (Chubby's jeopardy): from the first failed attempt until one succeeds, or
// once the renewal due at anchor + ttl/3 is half an interval late (an
// attempt hanging on a node that does not answer). It is false once lost:
// then Done has closed. The same rule as every leasehold client's
// (clients/conformance/PROTOCOL.md).
func (w *watchdog) atRisk() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	interval := w.timing.interval()
	overdue := !now.Before(w.anchor.Add(interval + interval/2))
	return w.lost == nil && now.Before(w.timing.deadline(w.anchor)) && (w.failing || overdue)
}

// fire records why the lease is lost, if nothing was recorded yet, and
// closes done.
func (w *watchdog) fire(lost *LostError) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lost == nil {
		w.lost = lost
		close(w.done)
	}
}

// halt stops the watchdog and waits until it has stopped, so that no
// renewal is sent after whatever the caller does next; Done closes with
// Ended unless the lease was lost before.
func (w *watchdog) halt() {
	w.stop()
	<-w.exited
	w.fire(&LostError{Reason: Ended, Message: "the guard was released"})
}

func (w *watchdog) run(ctx context.Context) {
	defer close(w.exited)
	for {
		w.mu.Lock()
		anchor := w.anchor
		w.mu.Unlock()
		if !sleepUntil(ctx, anchor.Add(w.timing.interval())) {
			return
		}
		renewed, lost := w.renewBefore(ctx, w.timing.deadline(anchor))
		if ctx.Err() != nil {
			return
		}
		if lost != nil {
			w.fire(lost)
			return
		}
		w.mu.Lock()
		if renewed.After(w.anchor) {
			w.anchor = renewed
		}
		w.failing = false
		w.mu.Unlock()
	}
}

// renewBefore renews, retrying failures, until deadline; returns the new
// anchor, or why the lease is lost.
func (w *watchdog) renewBefore(ctx context.Context, deadline time.Time) (time.Time, *LostError) {
	pause := initialRenewalBackoff
	lastError := "no renewal attempt finished"
	for {
		if !time.Now().Before(deadline) {
			return time.Time{}, &LostError{Reason: Expired, Message: "no renewal succeeded before the safe deadline (last error: " + lastError + ")"}
		}
		attempt, cancel := context.WithDeadline(ctx, deadline)
		anchor, err := w.renew(attempt)
		cancel()
		if ctx.Err() != nil {
			return time.Time{}, nil
		}
		// An answer that came at or after the deadline does not count:
		// the lease may have ended meanwhile.
		late := !time.Now().Before(deadline)
		var lost *LostError
		switch {
		case err == nil && !late:
			return anchor, nil
		case err == nil:
			lastError = "the renewal was answered after the safe deadline"
		case errors.As(err, &lost):
			return time.Time{}, lost
		case errors.Is(err, context.DeadlineExceeded):
			lastError = "the renewal was still unanswered at the safe deadline"
		default:
			lastError = err.Error()
		}
		w.mu.Lock()
		w.failing = true
		w.mu.Unlock()
		if late {
			continue
		}
		next := time.Now().Add(pause)
		if next.After(deadline) {
			next = deadline
		}
		if !sleepUntil(ctx, next) {
			return time.Time{}, nil
		}
		if pause *= 2; pause > maxRenewalBackoff {
			pause = maxRenewalBackoff
		}
	}
}

// revokedBy turns an error whose code is one of codes, the cluster's word
// that what was renewed has ended, into a *LostError.
func revokedBy(err error, codes ...ErrorCode) error {
	var api *APIError
	if errors.As(err, &api) {
		for _, code := range codes {
			if api.Code == code {
				return &LostError{Reason: Revoked, Code: code, Message: api.Message}
			}
		}
	}
	return err
}

// sleepUntil sleeps until t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
