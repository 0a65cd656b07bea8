package leasehold

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"
)

const testTTL = 3 * time.Second

// uniqueName keeps tests on the shared cluster apart.
func uniqueName(t *testing.T) string {
	return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
}

// Ensures a guard's token fences: a second owner is refused while it is
// held, and the next grant after its release carries a higher token.
func TestLockTokensIncreaseAcrossHolders(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 30*time.Second)
	client := shared.client(t)
	name := uniqueName(t)
	first, err := client.Lock(ctx, name, LockOptions{Owner: "a", TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Acquire(ctx, name, "b", testTTL, nil)
	var api *APIError
	if !errors.Is(err, ErrHeld) || !errors.As(err, &api) || api.Status != 409 {
		t.Fatalf("second owner: %v, want 409 held", err)
	}
	var holder string
	if !api.Detail("holder", &holder) || holder != "a" {
		t.Fatalf("held names holder %q", holder)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-first.Done()
	if lost := first.Err().(*LostError); lost.Reason != Ended {
		t.Fatalf("after release: %v", lost)
	}
	second, err := client.Lock(ctx, name, LockOptions{Owner: "b", TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(ctx)
	if second.Token() <= first.Token() {
		t.Fatalf("token %d after %d", second.Token(), first.Token())
	}
}

// Ensures waiting acquires are granted in the order they queued.
func TestWaitingAcquiresAreFIFO(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 30*time.Second)
	client := shared.client(t)
	name := uniqueName(t)
	holder, err := client.Acquire(ctx, name, "holder", testTTL, nil)
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan string, 2)
	for _, owner := range []string{"first", "second"} {
		owner := owner
		go func() {
			lease, err := client.Acquire(ctx, name, owner, testTTL, &AcquireOptions{Wait: 20 * time.Second})
			if err != nil {
				granted <- "error: " + err.Error()
				return
			}
			granted <- owner
			_ = client.Release(ctx, name, lease.Token)
		}()
		waitForWaiters(t, client, name, owner)
	}
	if err := client.Release(ctx, name, holder.Token); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"first", "second"} {
		if got := <-granted; got != want {
			t.Fatalf("granted %q, want %q", got, want)
		}
	}
}

// waitForWaiters waits until owner is queued for name.
func waitForWaiters(t *testing.T, client *Client, name, owner string) {
	t.Helper()
	giveUp := time.Now().Add(10 * time.Second)
	for time.Now().Before(giveUp) {
		view, err := client.Get(context.Background(), name)
		if err == nil && view != nil {
			for _, w := range view.Waiters {
				if w.Owner == owner {
					return
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never queued for %s", owner, name)
}

// Ensures the watchdog keeps a lease well past its ttl, under one token,
// and that a safe lock is neither lost nor at risk meanwhile.
func TestWatchdogKeepsTheLeasePastItsTTL(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 30*time.Second)
	client := shared.client(t)
	name := uniqueName(t)
	lock, err := client.Lock(ctx, name, LockOptions{TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	firstDeadline := lock.ValidUntil()
	select {
	case <-lock.Done():
		t.Fatalf("lost: %v", lock.Err())
	case <-time.After(2 * testTTL):
	}
	if lock.Err() != nil || lock.AtRisk() {
		t.Fatalf("err %v, at risk %v", lock.Err(), lock.AtRisk())
	}
	if !lock.ValidUntil().After(firstDeadline) {
		t.Fatal("the safe deadline did not move")
	}
	view, err := client.Get(ctx, name)
	if err != nil || view == nil || view.Token != lock.Token() || view.Owner != lock.Owner() {
		t.Fatalf("lease %+v (%v), want token %d", view, err, lock.Token())
	}
}

// Ensures a guard whose lease the cluster ended behind its back (released
// by token) reports Revoked with the cluster's code at its next renewal.
func TestLockRevokedByTheCluster(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 30*time.Second)
	client := shared.client(t)
	name := uniqueName(t)
	lock, err := client.Lock(ctx, name, LockOptions{TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Release(ctx, name, lock.Token()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lock.Done():
	case <-time.After(testTTL):
		t.Fatal("not lost within a ttl")
	}
	var lost *LostError
	if !errors.As(lock.Err(), &lost) || lost.Reason != Revoked || lost.Code != CodeNotHeld {
		t.Fatalf("err %v, want revoked not_held", lock.Err())
	}
	if err := lock.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release of a lost lock: %v", err)
	}
}

// Ensures a retried acquire that names the same request id is answered with
// the first grant, not a second one.
func TestRequestIDAnswersARetryWithTheFirstGrant(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 30*time.Second)
	client := shared.client(t)
	name := uniqueName(t)
	id := NewRequestID()
	first, err := client.Acquire(ctx, name, "a", testTTL, &AcquireOptions{RequestID: id})
	if err != nil {
		t.Fatal(err)
	}
	again, err := client.Acquire(ctx, name, "a", testTTL, &AcquireOptions{RequestID: id})
	if err != nil {
		t.Fatal(err)
	}
	if again.Token != first.Token || again.Reacquired {
		t.Fatalf("retry answered %+v, first %+v", again.Grant, first.Grant)
	}
	_, err = client.Acquire(ctx, name+"-other", "a", testTTL, &AcquireOptions{RequestID: id})
	if !errors.Is(err, ErrRequestIDReused) {
		t.Fatalf("the id on another lock: %v", err)
	}
}

// Ensures the client moves to the node that names itself leader, whichever
// node it asked first.
func TestClientFollowsTheLeader(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 30*time.Second)
	leader, err := shared.waitForLeader()
	if err != nil {
		t.Fatal(err)
	}
	follower := leader%len(shared.addrs) + 1
	endpoints := []string{shared.addrs[follower-1]}
	for node := 1; node <= len(shared.addrs); node++ {
		if node != follower {
			endpoints = append(endpoints, shared.addrs[node-1])
		}
	}
	client, err := New(endpoints, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.Acquire(ctx, uniqueName(t), "a", testTTL, nil); err != nil {
		t.Fatal(err)
	}
	if got := client.endpoints[client.preferred.Load()].authority; got != shared.addrs[leader-1] {
		t.Fatalf("prefers %s, leader is %s", got, shared.addrs[leader-1])
	}
}

// Ensures a guard renews through a new leader after the old one is killed
// (no loss, same token), and that a guard reports at_risk, then loses its
// lock no later than its safe deadline, once every node is stopped; the
// next holder's token is higher.
func TestGuardThroughLeaderKillThenLostByTheSafeDeadline(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 60*time.Second)
	c := ownCluster(t)
	client := c.client(t)
	name := uniqueName(t)
	// A follower may hold a request until a new leader is elected (up to
	// 3 s without a quorum): the ttl leaves room for that after the kill.
	const ttl = 6 * time.Second
	survivor, err := client.Lock(ctx, name+"-survivor", LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	leader, err := c.waitForLeader()
	if err != nil {
		t.Fatal(err)
	}
	c.kill(leader)
	// A ttl after the kill: the lease lived only through renewals the new
	// leader committed.
	select {
	case <-survivor.Done():
		t.Fatalf("lost across the leader kill: %v", survivor.Err())
	case <-time.After(ttl):
	}
	view, err := client.Get(ctx, survivor.Name())
	if err != nil || view == nil || view.Token != survivor.Token() {
		t.Fatalf("after the kill: %+v (%v)", view, err)
	}
	if err := survivor.Release(ctx); err != nil {
		t.Fatal(err)
	}

	lock, err := client.Lock(ctx, name, LockOptions{TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	for node := range c.procs {
		c.signal(node, syscall.SIGSTOP)
	}
	deadline := lock.ValidUntil()
	// At risk before lost: sampled while Done is still open.
	sawAtRisk := make(chan bool, 1)
	go func() {
		saw := false
		defer func() { sawAtRisk <- saw }()
		for {
			risk := lock.AtRisk()
			select {
			case <-lock.Done():
				return
			case <-time.After(10 * time.Millisecond):
				saw = saw || risk
			}
		}
	}()
	<-lock.Done()
	lostAt := time.Now()
	// Scheduling is the only slack allowed; a watchdog that waited for an
	// attempt's timeout (6 s) or the retry budget would be seconds late.
	if lostAt.After(deadline.Add(500 * time.Millisecond)) {
		t.Fatalf("lost %v after the safe deadline", lostAt.Sub(deadline))
	}
	var lost *LostError
	if !errors.As(lock.Err(), &lost) || lost.Reason != Expired {
		t.Fatalf("err %v, want expired", lock.Err())
	}
	if !<-sawAtRisk {
		t.Fatal("never at risk before it was lost")
	}
	for node := range c.procs {
		c.signal(node, syscall.SIGCONT)
	}
	next, err := client.Acquire(ctx, name, "next", testTTL, &AcquireOptions{Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if next.Token <= lock.Token() {
		t.Fatalf("next token %d after %d", next.Token, lock.Token())
	}
}
