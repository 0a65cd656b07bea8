// Command leasehold-conformance is the Go client's conformance driver
// (clients/conformance/PROTOCOL.md): it reads commands as JSON lines on stdin, runs
// each through the client's public API, concurrently, and writes one JSON
// line per answer on stdout. It holds no lock logic of its own.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// request is one command line; each op reads the fields it names.
type request struct {
	ID            json.RawMessage        `json:"id"`
	Op            string                 `json:"op"`
	Name          string                 `json:"name"`
	Names         []string               `json:"names"`
	Owner         string                 `json:"owner"`
	TTLMs         int64                  `json:"ttl_ms"`
	WaitMs        int64                  `json:"wait_ms"`
	DriftMarginMs *int64                 `json:"drift_margin_ms"`
	Handle        string                 `json:"handle"`
	TimeoutMs     int64                  `json:"timeout_ms"`
	RequestID     string                 `json:"request_id"`
	Token         leasehold.FencingToken `json:"token"`
	Session       string                 `json:"session"`
	Key           string                 `json:"key"`
	Lock          string                 `json:"lock"`
	Gate          string                 `json:"gate"`
	Value         json.RawMessage        `json:"value"`
}

type result map[string]interface{}

// guard is what a handle names: a lock, a session, a lock under a
// session, or a multi-lock.
type guard interface {
	// status is the guard's token (nil for a session), whether it is lost
	// or at risk, and its safe deadline.
	status() (token interface{}, lost, atRisk bool, validUntil time.Time)
	// done closes when the guard is lost; err then says why.
	done() <-chan struct{}
	err() error
	unlock(ctx context.Context) error
}

type lockGuard struct{ *leasehold.Lock }

func (g lockGuard) status() (interface{}, bool, bool, time.Time) {
	return g.Token(), g.Err() != nil, g.AtRisk(), g.ValidUntil()
}
func (g lockGuard) done() <-chan struct{}            { return g.Done() }
func (g lockGuard) err() error                       { return g.Err() }
func (g lockGuard) unlock(ctx context.Context) error { return g.Release(ctx) }

type sessionGuard struct{ *leasehold.Session }

func (g sessionGuard) status() (interface{}, bool, bool, time.Time) {
	return nil, g.Err() != nil, g.AtRisk(), g.ValidUntil()
}
func (g sessionGuard) done() <-chan struct{} { return g.Done() }
func (g sessionGuard) err() error            { return g.Err() }
func (g sessionGuard) unlock(ctx context.Context) error {
	_, err := g.Close(ctx)
	return err
}

// sessionLock is a lock held under a session: it lives and is lost with it.
type sessionLock struct {
	session *leasehold.Session
	client  *leasehold.Client
	name    string
	token   leasehold.FencingToken
}

func (g sessionLock) status() (interface{}, bool, bool, time.Time) {
	return g.token, g.session.Err() != nil, g.session.AtRisk(), g.session.ValidUntil()
}
func (g sessionLock) done() <-chan struct{} { return g.session.Done() }
func (g sessionLock) err() error            { return g.session.Err() }
func (g sessionLock) unlock(ctx context.Context) error {
	return g.client.Release(ctx, g.name, g.token)
}

// lockSet is a multi-lock: no watchdog, safe until its ttl's deadline.
type lockSet struct {
	set    *leasehold.LockSet
	margin time.Duration
	// expired closes at the set's safe deadline.
	expired chan struct{}
}

func (g lockSet) status() (interface{}, bool, bool, time.Time) {
	until := g.set.ValidUntil(g.margin)
	return g.set.Token, !time.Now().Before(until), false, until
}
func (g lockSet) done() <-chan struct{} { return g.expired }
func (g lockSet) err() error {
	if _, lost, _, _ := g.status(); lost {
		return &leasehold.LostError{Reason: leasehold.Expired, Message: "the multi-lock's ttl has run out"}
	}
	return nil
}
func (g lockSet) unlock(ctx context.Context) error { return g.set.Release(ctx) }

type driver struct {
	client *leasehold.Client
	out    *json.Encoder
	outMu  sync.Mutex

	mu      sync.Mutex
	guards  map[string]guard
	handles int
}

func (d *driver) write(v interface{}) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	_ = d.out.Encode(v)
}

func (d *driver) keep(g guard) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.handles++
	handle := "h" + strconv.Itoa(d.handles)
	d.guards[handle] = g
	return handle
}

func (d *driver) guard(handle string) (guard, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if g, ok := d.guards[handle]; ok {
		return g, nil
	}
	return nil, invalid("no handle " + strconv.Quote(handle))
}

func (d *driver) forget(handle string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.guards, handle)
}

type invalidRequest string

func (e invalidRequest) Error() string { return string(e) }

func invalid(message string) error { return invalidRequest(message) }

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func (d *driver) serve(r request) (result, error) {
	ctx := context.Background()
	switch r.Op {
	case "lock":
		options := leasehold.LockOptions{Owner: r.Owner, TTL: ms(r.TTLMs), Wait: ms(r.WaitMs)}
		if r.DriftMarginMs != nil {
			options.DriftMargin = ms(*r.DriftMarginMs)
			if *r.DriftMarginMs == 0 {
				options.DriftMargin = leasehold.NoDriftMargin
			}
		}
		lock, err := d.client.Lock(ctx, r.Name, options)
		if err != nil {
			return nil, err
		}
		return result{"handle": d.keep(lockGuard{lock}), "token": lock.Token(), "owner": lock.Owner()}, nil
	case "guard":
		g, err := d.guard(r.Handle)
		if err != nil {
			return nil, err
		}
		token, lost, atRisk, until := g.status()
		return result{"token": token, "lost": lost, "at_risk": atRisk, "safe_remaining_ms": time.Until(until).Milliseconds()}, nil
	case "wait_lost":
		g, err := d.guard(r.Handle)
		if err != nil {
			return nil, err
		}
		timer := time.NewTimer(ms(r.TimeoutMs))
		defer timer.Stop()
		select {
		case <-g.done():
		case <-timer.C:
			return result{"lost": false, "reason": nil, "code": nil}, nil
		}
		var lost *leasehold.LostError
		if !errors.As(g.err(), &lost) {
			return nil, fmt.Errorf("done without a reason: %v", g.err())
		}
		var code interface{}
		if lost.Code != "" {
			code = lost.Code
		}
		return result{"lost": true, "reason": lost.Reason, "code": code}, nil
	case "unlock", "session_close":
		g, err := d.guard(r.Handle)
		if err != nil {
			return nil, err
		}
		d.forget(r.Handle)
		return result{}, g.unlock(ctx)
	case "acquire":
		lease, err := d.client.Acquire(ctx, r.Name, r.Owner, ms(r.TTLMs), &leasehold.AcquireOptions{Wait: ms(r.WaitMs), RequestID: r.RequestID})
		if err != nil {
			return nil, err
		}
		return result{"token": lease.Token, "ttl_ms": lease.TTLMs}, nil
	case "renew":
		lease, err := d.client.Renew(ctx, r.Name, r.Token, ms(r.TTLMs))
		if err != nil {
			return nil, err
		}
		return result{"token": lease.Token, "ttl_ms": lease.TTLMs}, nil
	case "release":
		return result{}, d.client.Release(ctx, r.Name, r.Token)
	case "get":
		view, err := d.client.Get(ctx, r.Name)
		if err != nil || view == nil {
			return result{"lease": nil}, err
		}
		return result{"lease": result{"owner": view.Owner, "token": view.Token}}, nil
	case "session_open":
		session, err := d.client.OpenSession(ctx, leasehold.SessionOptions{Owner: r.Owner, TTL: ms(r.TTLMs)})
		if err != nil {
			return nil, err
		}
		return result{"handle": d.keep(sessionGuard{session}), "session": session.ID()}, nil
	case "session_lock":
		g, err := d.guard(r.Session)
		if err != nil {
			return nil, err
		}
		session, ok := g.(sessionGuard)
		if !ok {
			return nil, invalid(r.Session + " is not a session")
		}
		grant, err := session.Lock(ctx, r.Name, ms(r.WaitMs))
		if err != nil {
			return nil, err
		}
		held := sessionLock{session: session.Session, client: d.client, name: r.Name, token: grant.Token}
		return result{"handle": d.keep(held), "token": grant.Token}, nil
	case "multi_lock":
		owner := r.Owner
		if owner == "" {
			owner = leasehold.DefaultOwner()
		}
		set, err := d.client.LockMany(ctx, r.Names, owner, ms(r.TTLMs), &leasehold.AcquireOptions{Wait: ms(r.WaitMs)})
		if err != nil {
			return nil, err
		}
		g := lockSet{set: set, margin: ms(r.TTLMs) / 10, expired: make(chan struct{})}
		time.AfterFunc(time.Until(set.ValidUntil(g.margin)), func() { close(g.expired) })
		tokens := result{}
		for _, grant := range set.Grants {
			tokens[grant.Name] = grant.Token
		}
		return result{"handle": d.keep(g), "tokens": tokens}, nil
	case "record_write":
		_, err := d.client.PutRecord(ctx, r.Key, r.Lock, r.Token, r.Value)
		return result{}, err
	case "record_read":
		record, err := d.client.GetRecord(ctx, r.Key)
		if err != nil || record == nil {
			return result{"value": nil, "token": nil}, err
		}
		return result{"value": record.Value, "token": record.Token}, nil
	case "gate_pass":
		return result{}, d.client.PassGate(ctx, r.Gate, r.Lock, r.Token)
	}
	return nil, invalid("unknown op " + strconv.Quote(r.Op))
}

// failure is the answer's error object.
func failure(err error) result {
	var api *leasehold.APIError
	var unavailable *leasehold.UnavailableError
	var lost *leasehold.LostError
	var bad invalidRequest
	switch {
	case errors.As(err, &api):
		return result{"kind": "api", "code": api.Code, "status": api.Status, "message": api.Message}
	case errors.As(err, &unavailable):
		var code, status interface{}
		if unavailable.Code != "" {
			code, status = unavailable.Code, unavailable.Status
		}
		return result{"kind": "unavailable", "code": code, "status": status, "message": unavailable.Message}
	case errors.As(err, &lost):
		return result{"kind": "lost", "code": nil, "status": nil, "message": lost.Error()}
	case errors.As(err, &bad):
		return result{"kind": "invalid", "code": nil, "status": nil, "message": bad.Error()}
	}
	// A refusal by the client before anything was sent (a ttl or margin
	// out of range) or an answer it could not read.
	return result{"kind": "invalid", "code": nil, "status": nil, "message": err.Error()}
}

func main() {
	var endpoints []string
	for _, e := range strings.Split(os.Getenv("LEASEHOLD_ENDPOINTS"), ",") {
		if e = strings.TrimSpace(e); e != "" {
			endpoints = append(endpoints, e)
		}
	}
	options := &leasehold.Options{Token: os.Getenv("LEASEHOLD_TOKEN")}
	if budget, err := strconv.ParseInt(os.Getenv("LEASEHOLD_RETRY_BUDGET_MS"), 10, 64); err == nil {
		options.RetryBudget = ms(budget)
	}
	client, err := leasehold.New(endpoints, options)
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasehold-conformance:", err)
		os.Exit(2)
	}
	d := &driver{client: client, out: json.NewEncoder(os.Stdout), guards: map[string]guard{}}
	d.write(result{"ready": true, "client": "go", "version": leasehold.Version})

	var running sync.WaitGroup
	lines := bufio.NewScanner(os.Stdin)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		var r request
		if err := json.Unmarshal(lines.Bytes(), &r); err != nil {
			d.write(result{"id": nil, "ok": false, "error": failure(invalid(err.Error()))})
			continue
		}
		if r.Op == "shutdown" {
			// Requests still running (a long wait_lost) are cut off.
			d.write(result{"id": r.ID, "ok": true})
			os.Exit(0)
		}
		running.Add(1)
		go func() {
			defer running.Done()
			answer, err := d.serve(r)
			if err != nil {
				d.write(result{"id": r.ID, "ok": false, "error": failure(err)})
				return
			}
			answer["id"], answer["ok"] = r.ID, true
			d.write(answer)
		}()
	}
	running.Wait()
}
