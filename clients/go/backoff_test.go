package leasehold

import (
	"testing"
	"time"
)

// Ensures an overloaded node's Retry-After is honoured and stretched by
// jitter of at most half again, and that pauses while there is no leader
// grow from 25 ms to at most 500 ms, each from its upper half.
func TestBackoffHonoursRetryAfterWithJitter(t *testing.T) {
	distinct := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		b := newBackoff()
		pause := b.overloaded(2 * time.Second)
		if pause < 2*time.Second || pause > 3*time.Second {
			t.Fatalf("pause %v for Retry-After 2", pause)
		}
		distinct[pause] = true
	}
	if len(distinct) < 2 {
		t.Fatal("no jitter")
	}
	b := newBackoff()
	ceiling := 25 * time.Millisecond
	for i := 0; i < 8; i++ {
		pause := b.unavailable()
		if pause < ceiling/2 || pause > ceiling {
			t.Fatalf("try %d: pause %v outside [%v, %v]", i, pause, ceiling/2, ceiling)
		}
		if ceiling *= 2; ceiling > maxUnavailablePause {
			ceiling = maxUnavailablePause
		}
	}
}
