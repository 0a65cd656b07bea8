package leasehold

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// faultProxy relays TCP connections to one node and injects the faults the
// client must survive: an answer the node sent but the client never gets
// (the connection closes instead), and a 503 overloaded with Retry-After
// answered in the node's place.
type faultProxy struct {
	listener net.Listener
	target   string
	// dropAnswers: this many of the node's next answers are cut off.
	dropAnswers atomic.Int32
	// overloaded: this many of the next connections are answered 503.
	overloaded atomic.Int32
	// refused counts the requests the proxy answered 503 itself.
	refused atomic.Int32
}

func startFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{listener: listener, target: target}
	t.Cleanup(func() { listener.Close() })
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			go p.serve(conn)
		}
	}()
	return p
}

func (p *faultProxy) addr() string { return p.listener.Addr().String() }

func (p *faultProxy) serve(client net.Conn) {
	defer client.Close()
	if p.overloaded.Add(-1) >= 0 {
		// Read the whole request first, so that the client reads the answer
		// rather than a reset.
		request, err := http.ReadRequest(bufio.NewReader(client))
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, request.Body)
		body := `{"error":{"code":"overloaded","message":"injected by the test's proxy"}}`
		fmt.Fprintf(client, "HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s", len(body), body)
		p.refused.Add(1)
		return
	}
	p.overloaded.Add(1) // undo: this connection is relayed
	node, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer node.Close()
	go func() {
		_, _ = io.Copy(node, client)
		node.Close()
	}()
	buffer := make([]byte, 64<<10)
	for {
		n, err := node.Read(buffer)
		if n > 0 {
			if p.dropAnswers.Add(-1) >= 0 {
				return // the node answered; the client never hears it
			}
			p.dropAnswers.Add(1)
			if _, err := client.Write(buffer[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// leaderAddr is the shared cluster's leader.
func leaderAddr(t *testing.T) string {
	t.Helper()
	leader, err := shared.waitForLeader()
	if err != nil {
		t.Fatal(err)
	}
	return shared.addrs[leader-1]
}

// Ensures an acquire whose answer was lost after the cluster applied it is
// retried under the same request id and answered with that first grant,
// not granted again (a second grant to the same owner would answer
// reacquired).
func TestRetryAfterADroppedAnswerReusesTheRequestID(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 30*time.Second)
	proxy := startFaultProxy(t, leaderAddr(t))
	client, err := New([]string{proxy.addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	name := uniqueName(t)
	proxy.dropAnswers.Store(1)
	lease, err := client.Acquire(ctx, name, "a", testTTL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if proxy.dropAnswers.Load() != 0 {
		t.Fatal("no answer was dropped")
	}
	if lease.Reacquired {
		t.Fatalf("the retry was granted again: %+v", lease.Grant)
	}
	view, err := client.Get(ctx, name)
	if err != nil || view == nil || view.Token != lease.Token || view.Owner != "a" {
		t.Fatalf("lease %+v (%v), want token %d", view, err, lease.Token)
	}
}

// Ensures a 503 overloaded is retried, no sooner than its Retry-After.
func TestOverloadedIsRetriedAfterItsRetryAfter(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 30*time.Second)
	proxy := startFaultProxy(t, leaderAddr(t))
	client, err := New([]string{proxy.addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	proxy.overloaded.Store(1)
	started := time.Now()
	if _, err := client.Acquire(ctx, uniqueName(t), "a", testTTL, nil); err != nil {
		t.Fatal(err)
	}
	if proxy.refused.Load() != 1 {
		t.Fatalf("the proxy refused %d requests, want 1", proxy.refused.Load())
	}
	if waited := time.Since(started); waited < time.Second {
		t.Fatalf("retried after %v, before the Retry-After of 1 s", waited)
	}
	// A budget shorter than the Retry-After gives up with the last refusal.
	short, err := New([]string{proxy.addr()}, &Options{RetryBudget: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	proxy.overloaded.Store(1)
	_, err = short.Acquire(ctx, uniqueName(t), "a", testTTL, nil)
	var unavailable *UnavailableError
	if !errors.As(err, &unavailable) || unavailable.Code != CodeOverloaded || unavailable.Status != 503 {
		t.Fatalf("with a 500 ms budget: %v", err)
	}
}
