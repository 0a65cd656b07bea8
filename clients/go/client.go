package leasehold

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// attemptTimeout is how long one try of a call may take, beyond the time it
// may wait in a queue.
const attemptTimeout = 6 * time.Second

// Version is this client's version.
const Version = "0.1.0"

// DefaultRetryBudget is how long one call keeps retrying by default.
const DefaultRetryBudget = 10 * time.Second

// maxAnswerBytes bounds an answer body: the longest legitimate ones (lists,
// a lock with a long queue) are far shorter, and a node that sent more
// would have the client allocate without end.
const maxAnswerBytes = 64 << 20

// leaderAddrHeader names where the answering node says the leader is.
const leaderAddrHeader = "x-leasehold-leader-addr"

// Options of a Client; the zero value (or nil) is a plain-http client
// without a token.
type Options struct {
	// Token is sent as "authorization: Bearer <Token>" on every request.
	Token string
	// TLS, when set, is the TLS configuration for https endpoints, and
	// endpoints without a scheme become https.
	TLS *tls.Config
	// RetryBudget is how long one call keeps retrying when no node gives a
	// usable answer (DefaultRetryBudget when zero). A waiting acquire gets
	// its wait on top.
	RetryBudget time.Duration
}

// Client is a client of one cluster. It is safe for concurrent use.
type Client struct {
	endpoints   []endpoint
	http        *http.Client
	token       string
	retryBudget time.Duration
	// preferred is the endpoint tried first: the leader, as far as known.
	preferred atomic.Uint64
}

// endpoint is one node's base URL and its host:port, the form nodes name
// the leader in.
type endpoint struct {
	base      string
	authority string
}

// New builds a client of the cluster whose nodes are endpoints, each
// "host:port" or "scheme://host:port".
func New(endpoints []string, options *Options) (*Client, error) {
	if options == nil {
		options = &Options{}
	}
	if len(endpoints) == 0 {
		return nil, errors.New("leasehold: no endpoints")
	}
	parsed := make([]endpoint, 0, len(endpoints))
	for _, e := range endpoints {
		raw := strings.TrimSpace(e)
		if !strings.Contains(raw, "://") {
			scheme := "http"
			if options.TLS != nil {
				scheme = "https"
			}
			raw = scheme + "://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
			return nil, fmt.Errorf("leasehold: invalid endpoint %q", e)
		}
		parsed = append(parsed, endpoint{base: u.Scheme + "://" + u.Host, authority: u.Host})
	}
	transport := &http.Transport{
		// Endpoints are nodes (or proxies named on purpose): never an
		// HTTP proxy from the environment.
		Proxy:       nil,
		DialContext: (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		// Waiting acquires over HTTP/1.1 each hold a connection: keep that
		// many for reuse rather than the default two.
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     60 * time.Second,
		TLSClientConfig:     options.TLS,
		// A custom TLS configuration turns HTTP/2 off unless asked for.
		ForceAttemptHTTP2: true,
	}
	budget := options.RetryBudget
	if budget <= 0 {
		budget = DefaultRetryBudget
	}
	return &Client{
		endpoints:   parsed,
		http:        &http.Client{Transport: transport},
		token:       options.Token,
		retryBudget: budget,
	}, nil
}

// Close closes idle connections.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
}

var (
	requestCounter atomic.Uint64
	processStarted = time.Now().UnixNano()
)

// NewRequestID is a request id unique to this process run: pid, start time
// and a counter, so two processes (or two runs) never share one.
func NewRequestID() string {
	return fmt.Sprintf("%x-%x-%x", os.Getpid(), processStarted, requestCounter.Add(1))
}

// reply is one node's answer.
type reply struct {
	status     int
	leaderAddr string
	retryAfter time.Duration
	body       []byte
}

// call sends one request, following the leader and retrying
// unavailability until the retry budget (plus wait) is spent, with the
// same body, so the same request id, on every try: the next node at once
// after a refused connection or a 503 naming another leader (once per other
// node between pauses), else after a pause; a certificate the TLS
// handshake refuses ends the call at once. wait is how long the
// server may legitimately hold the request (a queued acquire). It decodes a
// 2xx answer into out and returns the instant the call started: no later
// than the send of its first attempt. A retry may be answered from the
// request-id record of an earlier attempt, whose commit came after the
// first send, never before it, so that instant is a safe anchor.
func (c *Client) call(ctx context.Context, method, path string, body interface{}, wait time.Duration, out interface{}) (time.Time, error) {
	started := time.Now()
	giveUp := started.Add(c.retryBudget + wait)
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return started, err
		}
	}
	pauses := newBackoff()
	// Tries left before the next pause that go to another node at once: one
	// refused the connection (the request never reached it: the node is
	// down, as its leader is after a crash) or named another leader in its
	// 503. At most one per other node between pauses, so nodes that name
	// each other, or all refusing, cannot make it spin.
	sweep := len(c.endpoints) - 1
	atOnce := sweep
	for {
		node := int(c.preferred.Load() % uint64(len(c.endpoints)))
		answer, err := c.send(ctx, node, method, path, payload, attemptTimeout+wait)
		var failure *UnavailableError
		var pause time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return started, ctx.Err()
			}
			// The TLS handshake refused the node's certificate: no retry,
			// here or at another node (see untrusted).
			if untrusted(err) {
				return started, &UnavailableError{Message: "untrusted certificate, not retried: " + err.Error()}
			}
			// Unreachable, refused or timed out: try the next node.
			c.moveOnFrom(node)
			if connectFailed(err) && atOnce > 0 {
				atOnce--
				continue
			}
			failure = &UnavailableError{Message: err.Error()}
			pause = pauses.unavailable()
		case answer.status != http.StatusServiceUnavailable:
			leader := c.namedLeader(answer)
			if leader < 0 {
				leader = node
			}
			c.preferred.Store(uint64(leader))
			return started, decode(answer, out)
		default:
			refusal := apiError(answer)
			failure = &UnavailableError{Code: refusal.Code, Status: refusal.Status, Message: refusal.Message}
			if refusal.Code == CodeOverloaded {
				// The node sheds load: leave it alone as long as it asks,
				// and let the others take the next try.
				c.moveOnFrom(node)
				pause = pauses.overloaded(answer.retryAfter)
			} else {
				// A node that names itself leader yet cannot commit may be
				// cut off from the others (openraft has no CheckQuorum):
				// follow a leader named elsewhere, else try the next node.
				if leader := c.namedLeader(answer); leader >= 0 && leader != node {
					c.preferred.Store(uint64(leader))
					if atOnce > 0 {
						atOnce--
						continue
					}
				} else {
					c.moveOnFrom(node)
				}
				pause = pauses.unavailable()
			}
		}
		if time.Now().Add(pause).After(giveUp) {
			return started, failure
		}
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return started, ctx.Err()
		case <-timer.C:
		}
		atOnce = sweep
	}
}

// connectFailed is whether err is a failure to connect (refused, no route,
// no such host, the dial timed out): the request never reached the node, so
// another may take it at once.
func connectFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// untrusted is whether err came from a TLS handshake that refused the
// node's certificate: it does not chain to the CA the client trusts, names
// another host, or is otherwise invalid. Such a call is not retried: the
// nodes share one CA, so every node would be refused alike, and an
// untrusted certificate may be an impostor's, which no retry should paper
// over. The x509 errors are in the chain on every Go version (Go 1.20 wraps
// them in a *tls.CertificateVerificationError, which the module's minimum,
// Go 1.19, does not have).
func untrusted(err error) bool {
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &invalid)
}

// send is one try of a request to one node.
func (c *Client) send(ctx context.Context, node int, method, path string, payload []byte, timeout time.Duration) (*reply, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	request, err := http.NewRequestWithContext(ctx, method, c.endpoints[node].base+path, body)
	if err != nil {
		return nil, err
	}
	if payload != nil {
		request.Header.Set("content-type", "application/json")
	}
	if c.token != "" {
		request.Header.Set("authorization", "Bearer "+c.token)
	}
	response, err := c.http.Do(request)
	if err != nil {
		return nil, err
	}
	defer response.Body.Close()
	data, err := io.ReadAll(io.LimitReader(response.Body, maxAnswerBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxAnswerBytes {
		return nil, fmt.Errorf("the answer is longer than %d bytes", maxAnswerBytes)
	}
	answer := &reply{status: response.StatusCode, leaderAddr: response.Header.Get(leaderAddrHeader), body: data}
	// Nodes send Retry-After in whole seconds.
	if seconds, err := strconv.Atoi(strings.TrimSpace(response.Header.Get("retry-after"))); err == nil && seconds > 0 {
		answer.retryAfter = time.Duration(seconds) * time.Second
	}
	return answer, nil
}

// namedLeader is the endpoint the answer names as leader, -1 when it names
// none of ours.
func (c *Client) namedLeader(answer *reply) int {
	if answer.leaderAddr == "" {
		return -1
	}
	for i, e := range c.endpoints {
		if e.authority == answer.leaderAddr {
			return i
		}
	}
	return -1
}

// moveOnFrom prefers the endpoint after node, unless another call already
// moved the preference elsewhere.
func (c *Client) moveOnFrom(node int) {
	next := uint64((node + 1) % len(c.endpoints))
	c.preferred.CompareAndSwap(uint64(node), next)
}

// decode reads a 2xx JSON answer into out, or turns an error answer into
// an *APIError.
func decode(answer *reply, out interface{}) error {
	if answer.status < 200 || answer.status >= 300 {
		return apiError(answer)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(answer.body, out); err != nil {
		return fmt.Errorf("leasehold: unexpected answer: %w", err)
	}
	return nil
}

// apiError is the error body of an answer; one that is not a leasehold
// error body keeps its status under CodeUnknown.
func apiError(answer *reply) *APIError {
	var parsed struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	result := &APIError{Status: answer.status, Code: CodeUnknown}
	if json.Unmarshal(answer.body, &parsed) != nil || parsed.Error == nil {
		text := string(answer.body)
		if len(text) > 200 {
			text = text[:200]
		}
		result.Message = text
		return result
	}
	_ = json.Unmarshal(parsed.Error["code"], &result.Code)
	_ = json.Unmarshal(parsed.Error["message"], &result.Message)
	delete(parsed.Error, "code")
	delete(parsed.Error, "message")
	result.Details = parsed.Error
	return result
}

// segment escapes one path segment (a lock name may hold '/').
func segment(s string) string {
	return url.PathEscape(s)
}

// wholeMs is d as the whole milliseconds the cluster takes; zero for none.
func wholeMs(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64(d / time.Millisecond)
}
