package leasehold

import (
	"math/rand"
	"time"
)

// The longest pause while there is no leader.
const maxUnavailablePause = 500 * time.Millisecond

// Assumed when an overloaded answer names no Retry-After.
const defaultOverloadedPause = time.Second

// backoff is how long one call pauses between tries: short and growing while
// a node is unreachable or an election runs, at least as long as the node
// asks when it is overloaded; always jittered, so that clients refused
// together do not come back together (as the Rust client's backoff.rs).
type backoff struct {
	next time.Duration
}

func newBackoff() backoff {
	return backoff{next: 25 * time.Millisecond}
}

// unavailable: after an unreachable node or an election in progress,
// doubling from 25 ms up to 500 ms, each pause drawn from its upper half.
// The server's Retry-After (a whole second) is not waited for here: an
// election usually ends sooner.
func (b *backoff) unavailable() time.Duration {
	pause := b.next
	b.next *= 2
	if b.next > maxUnavailablePause {
		b.next = maxUnavailablePause
	}
	return jitter(pause/2, pause)
}

// overloaded: the server's Retry-After (0 when it named none), stretched by
// up to half again, so the clients it refused together come back spread out.
func (b *backoff) overloaded(retryAfter time.Duration) time.Duration {
	pause := retryAfter
	if pause <= 0 {
		pause = defaultOverloadedPause
	}
	if pause < b.next {
		pause = b.next
	}
	return jitter(pause, pause+pause/2)
}

// jitter draws a duration uniformly from [low, high].
func jitter(low, high time.Duration) time.Duration {
	if high <= low {
		return low
	}
	return low + time.Duration(rand.Int63n(int64(high-low)+1))
}
