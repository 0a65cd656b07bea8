package leasehold

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// grantBody is a node's answer to an acquire.
const grantBody = `{"name":"n","owner":"o","token":57,"ttl_ms":10000,"expires_in_ms":10000,"deadline_tick":172,"reacquired":false}`

// fakeNode is a node that grants every acquire, or, once it is told of
// another leader, answers 503 not_leader naming it; it counts the tries.
type fakeNode struct {
	server *httptest.Server
	mu     sync.Mutex
	leader string
	tries  int
}

func startFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	n := &fakeNode{}
	n.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.mu.Lock()
		n.tries++
		leader := n.leader
		n.mu.Unlock()
		w.Header().Set("content-type", "application/json")
		if leader == "" {
			_, _ = w.Write([]byte(grantBody))
			return
		}
		w.Header().Set(leaderAddrHeader, leader)
		w.Header().Set("retry-after", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"not_leader","message":"not the leader"}}`))
	}))
	t.Cleanup(n.server.Close)
	return n
}

func (n *fakeNode) addr() string { return strings.TrimPrefix(n.server.URL, "http://") }

// naming has the node answer 503 naming leader (host:port) from now on.
func (n *fakeNode) naming(leader *fakeNode) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.leader = leader.addr()
}

func (n *fakeNode) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.tries
}

// refusingAddr is a local address nothing listens on: connecting is refused.
func refusingAddr(t *testing.T) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := listener.Addr().String()
	listener.Close()
	return addr
}

// noPauseClient is a client of endpoints with a zero retry budget: it can
// afford no pause, only tries taken at once. (Options.RetryBudget zero
// means the default, so the field is set here.)
func noPauseClient(t *testing.T, endpoints ...string) *Client {
	t.Helper()
	client, err := New(endpoints, nil)
	if err != nil {
		t.Fatal(err)
	}
	client.retryBudget = 0
	t.Cleanup(client.Close)
	return client
}

// Ensures a node that refuses the connection (down, as a crashed leader)
// sends the call to the next one at once, without a pause.
func TestRefusedNodeIsLeftForTheNextAtOnce(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	good := startFakeNode(t)
	client := noPauseClient(t, refusingAddr(t), good.addr())
	lease, err := client.Acquire(ctx, "n", "o", testTTL, nil)
	if err != nil {
		t.Fatalf("a refused connection was not followed by the next node at once: %v", err)
	}
	if lease.Token != 57 || good.count() != 1 {
		t.Fatalf("lease %+v after %d tries of the good node", lease.Grant, good.count())
	}
}

// Ensures a 503 that names another of the client's nodes as leader is
// followed at once, without a pause.
func TestNamedLeaderIsFollowedAtOnce(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	leader, follower := startFakeNode(t), startFakeNode(t)
	follower.naming(leader)
	client := noPauseClient(t, follower.addr(), leader.addr())
	if _, err := client.Acquire(ctx, "n", "o", testTTL, nil); err != nil {
		t.Fatalf("the named leader was not followed at once: %v", err)
	}
	if follower.count() != 1 || leader.count() != 1 {
		t.Fatalf("tries: follower %d, leader %d; want 1 each", follower.count(), leader.count())
	}
}

// Ensures two nodes that name each other as leader are each tried once, and
// then the call pauses (so, with no budget for a pause, fails): they cannot
// make the client spin.
func TestNodesNamingEachOtherAreEachTriedOnceBeforeAPause(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	first, second := startFakeNode(t), startFakeNode(t)
	first.naming(second)
	second.naming(first)
	client := noPauseClient(t, first.addr(), second.addr())
	_, err := client.Acquire(ctx, "n", "o", testTTL, nil)
	var unavailable *UnavailableError
	if !errors.As(err, &unavailable) || unavailable.Code != CodeNotLeader {
		t.Fatalf("got %v, want an *UnavailableError not_leader", err)
	}
	if got := fmt.Sprint(first.count(), second.count()); got != "1 1" {
		t.Fatalf("tries (first, second): %s, want 1 1", got)
	}
}

// Ensures a node whose certificate the TLS handshake refuses ends the call
// at once with an *UnavailableError naming the certificate: neither retried
// nor left for the next node. The certificate is httptest's self-signed
// one: not trusted at all, or trusted but for other hosts than the name
// the client checks. With an hour's retry budget, a retry runs into the
// test's bound.
func TestUntrustedCertificateIsNotRetried(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	var reached atomic.Int64
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
	}))
	// The refused handshakes are expected: keep them out of the test's log.
	server.Config.ErrorLog = log.New(io.Discard, "", 0)
	server.StartTLS()
	t.Cleanup(server.Close)
	trusted := x509.NewCertPool()
	trusted.AddCert(server.Certificate())
	for _, c := range []struct {
		name string
		tls  *tls.Config
	}{
		{"unknown authority", &tls.Config{}},
		{"another host", &tls.Config{RootCAs: trusted, ServerName: "leasehold.invalid"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, err := New([]string{server.URL, server.URL}, &Options{TLS: c.tls, RetryBudget: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(client.Close)
			_, err = client.Get(ctx, "n")
			t.Log(err)
			var unavailable *UnavailableError
			if !errors.As(err, &unavailable) || !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("got %v, want an *UnavailableError naming the certificate", err)
			}
		})
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the handler was reached %d times through an untrusted certificate", n)
	}
}
