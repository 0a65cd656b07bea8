package leasehold

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// Ensures a session keeps its locks past its ttl with one keepalive, that
// they are held under it, and that ending it on the cluster loses the
// session once, for all its locks, with the cluster's code.
func TestSessionKeepsItsLocksAndLosesThemTogether(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 30*time.Second)
	client := shared.client(t)
	session, err := client.OpenSession(ctx, SessionOptions{TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close(ctx)
	names := []string{uniqueName(t) + "-a", uniqueName(t) + "-b"}
	for _, name := range names {
		if _, err := session.Lock(ctx, name, 0); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-session.Done():
		t.Fatalf("lost: %v", session.Err())
	case <-time.After(2 * testTTL):
	}
	view, err := client.GetSession(ctx, session.ID())
	if err != nil || view == nil || len(view.Locks) != 2 {
		t.Fatalf("session %+v (%v), want two locks", view, err)
	}
	if _, err := client.DeleteSession(ctx, session.ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-session.Done():
	case <-time.After(testTTL):
		t.Fatal("not lost within a ttl of its deletion")
	}
	var lost *LostError
	if !errors.As(session.Err(), &lost) || lost.Reason != Revoked || lost.Code != CodeSessionNotFound {
		t.Fatalf("err %v, want revoked session_not_found", session.Err())
	}
	for _, name := range names {
		if view, err := client.Get(ctx, name); err != nil || view != nil {
			t.Fatalf("%s still held: %+v (%v)", name, view, err)
		}
	}
}

// Ensures a multi-lock takes all its locks under one token or none.
func TestMultiLockIsAllOrNone(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 30*time.Second)
	client := shared.client(t)
	a, b := uniqueName(t)+"-a", uniqueName(t)+"-b"
	blocker, err := client.Acquire(ctx, b, "other", testTTL, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.LockMany(ctx, []string{a, b}, "mover", testTTL, nil)
	var api *APIError
	var conflicts []map[string]interface{}
	if !errors.As(err, &api) || api.Code != CodeHeld || !api.Detail("conflicts", &conflicts) || len(conflicts) != 1 || conflicts[0]["name"] != b {
		t.Fatalf("with %s held: %v %v", b, err, conflicts)
	}
	if view, err := client.Get(ctx, a); err != nil || view != nil {
		t.Fatalf("%s taken by a refused multi-lock: %+v (%v)", a, view, err)
	}
	if err := client.Release(ctx, b, blocker.Token); err != nil {
		t.Fatal(err)
	}
	set, err := client.LockMany(ctx, []string{a, b}, "mover", testTTL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range set.Grants {
		if g.Token != set.Token || g.Owner != "mover" {
			t.Fatalf("grant %+v under token %d", g, set.Token)
		}
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{a, b} {
		if view, err := client.Get(ctx, name); err != nil || view != nil {
			t.Fatalf("%s still held: %+v (%v)", name, view, err)
		}
	}
}

// Ensures fenced records and gates admit the current token and refuse the
// one before it.
func TestRecordsAndGatesRefuseAStaleToken(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 30*time.Second)
	client := shared.client(t)
	name, key, gate := uniqueName(t), uniqueName(t)+"-record", uniqueName(t)+"-gate"
	if record, err := client.GetRecord(ctx, key); err != nil || record != nil {
		t.Fatalf("unwritten record: %+v (%v)", record, err)
	}
	old, err := client.Acquire(ctx, name, "old", testTTL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.PutRecord(ctx, key, name, old.Token, map[string]int{"balance": 10}); err != nil {
		t.Fatal(err)
	}
	if err := client.PassGate(ctx, gate, name, old.Token); err != nil {
		t.Fatal(err)
	}
	if err := client.Release(ctx, name, old.Token); err != nil {
		t.Fatal(err)
	}
	current, err := client.Acquire(ctx, name, "new", testTTL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.PutRecord(ctx, key, name, old.Token, 0); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("write with the old token: %v", err)
	}
	if _, err := client.PutRecord(ctx, key, name, current.Token, map[string]int{"balance": 20}); err != nil {
		t.Fatal(err)
	}
	record, err := client.GetRecord(ctx, key)
	if err != nil || record == nil || record.Token != current.Token {
		t.Fatalf("record %+v (%v)", record, err)
	}
	var value map[string]int
	if err := json.Unmarshal(record.Value, &value); err != nil || value["balance"] != 20 {
		t.Fatalf("value %s", record.Value)
	}
	if err := client.PassGate(ctx, gate, name, current.Token); err != nil {
		t.Fatal(err)
	}
	if err := client.PassGate(ctx, gate, name, old.Token); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("gate with the old token: %v", err)
	}
	if current, _, err := client.Check(ctx, name, old.Token); err != nil || current {
		t.Fatalf("check of the old token: %v %v", current, err)
	}
}
