package leasehold

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
)

// The fence endpoints, for resources that cannot keep tokens themselves:
// the fence check, fenced records and gates.

// Check says whether token is the current token of lock (linearizable),
// and returns the current token (nil when the lock is free).
func (c *Client) Check(ctx context.Context, lock string, token FencingToken) (bool, *FencingToken, error) {
	body := struct {
		Lock  string       `json:"lock"`
		Token FencingToken `json:"token"`
	}{lock, token}
	var answer struct {
		Current bool          `json:"current"`
		Token   *FencingToken `json:"token"`
	}
	_, err := c.call(ctx, http.MethodPost, "/v1/fence/check", body, 0, &answer)
	return answer.Current, answer.Token, err
}

// Record is a fenced record: its value and the lock and token that wrote it.
type Record struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
	Lock  string          `json:"lock"`
	Token FencingToken    `json:"token"`
	// Index of the log entry that wrote it.
	Index uint64 `json:"index"`
}

// PutRecord writes value (any JSON-encodable value) under key if token is
// the current token of lock; ErrStaleToken (with current_token) otherwise.
// Returns the index of the entry that wrote it.
func (c *Client) PutRecord(ctx context.Context, key, lock string, token FencingToken, value interface{}) (uint64, error) {
	body := struct {
		Lock      string       `json:"lock"`
		Token     FencingToken `json:"token"`
		Value     interface{}  `json:"value"`
		RequestID string       `json:"request_id"`
	}{lock, token, value, NewRequestID()}
	var answer struct {
		Index uint64 `json:"index"`
	}
	_, err := c.call(ctx, http.MethodPut, "/v1/records/"+segment(key), body, 0, &answer)
	return answer.Index, err
}

// GetRecord reads the record key; nil when it was never written.
func (c *Client) GetRecord(ctx context.Context, key string) (*Record, error) {
	var record Record
	_, err := c.call(ctx, http.MethodGet, "/v1/records/"+segment(key), nil, 0, &record)
	if errors.Is(err, ErrNoRecord) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &record, nil
}

// PassGate passes token of lock through the gate of resource: admitted when
// it is at least the highest the gate admitted so far; ErrStaleToken
// otherwise, ErrLockMismatch for a token of another lock.
func (c *Client) PassGate(ctx context.Context, resource, lock string, token FencingToken) error {
	body := struct {
		Lock      string       `json:"lock"`
		Token     FencingToken `json:"token"`
		RequestID string       `json:"request_id"`
	}{lock, token, NewRequestID()}
	_, err := c.call(ctx, http.MethodPost, "/v1/fence/gate/"+segment(resource), body, 0, nil)
	return err
}
