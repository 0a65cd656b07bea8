// Package leasehold is the Go client of leasehold, a Raft-replicated lease
// lock service with fencing tokens. It depends on the standard library only.
//
// A Lock is a held lock whose watchdog goroutine renews its lease every
// ttl/3. Its Done channel closes, and Err says why, the moment the holder
// can no longer be sure it holds the lock: no later than the safe deadline,
// the send time of the first attempt of the last successful grant or
// renewal + ttl − drift margin. Pass Token with every write to the
// protected resource.
//
//	client, err := leasehold.New([]string{"10.0.0.1:7701", "10.0.0.2:7701"}, nil)
//	lock, err := client.Lock(ctx, "payments:42", leasehold.LockOptions{TTL: 10 * time.Second, Wait: 30 * time.Second})
//	defer lock.Release(context.Background())
//	select {
//	case <-lock.Done(): // stop acting under the lock: lock.Err() says why
//	case result := <-work(ctx, lock.Token()):
//	}
//
// # Layout
//
//   - client.go — Client: endpoints, leader following, failover, the retry
//     loop every call goes through (one request id per mutation, reused on
//     each retry), request ids.
//   - backoff.go — pauses between tries: growing while a node is
//     unreachable, Retry-After with jitter when it is overloaded.
//   - errors.go — APIError (one ErrorCode per API error), UnavailableError,
//     LostError.
//   - locks.go — acquire, renew, release, get and list of single locks.
//   - watchdog.go — the renewal loop and safe deadline shared by Lock and
//     Session.
//   - lock.go — Lock, the guard of one lock.
//   - session.go — sessions: the endpoints and the Session guard.
//   - multi.go — several locks under one token, all or none.
//   - fence.go — the fence check, fenced records and gates.
//
// # HTTP/2
//
// Go's standard library speaks HTTP/2 to https endpoints (negotiated by
// ALPN), so there every request, waiting acquires included, shares one
// connection per node. It has no client for h2c (HTTP/2 without TLS, which
// lives in golang.org/x/net/http2), so to http endpoints this client speaks
// HTTP/1.1: each waiting acquire holds a connection of its own while it
// waits.
package leasehold
