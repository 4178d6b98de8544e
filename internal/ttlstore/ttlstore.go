// Package ttlstore is the one store of the gateway's two caches, the
// exact answer cache (policy/cache) and the guardrails verdict cache
// (policy/guardrails): byte values by key, each kept for the store's time
// to live. Each cache is a codec over it. Two implementations:
//
//   - inprocess: in process, a least-recently-used map bounded in entries
//     and bytes, shared across config reloads by name;
//   - inredis: in Redis, shared by every gateway instance, with one
//     health rule: a run of real failures rests Redis (a client hanging up
//     is never one), requests cost nothing while it rests, and a probe in
//     the background decides when it is back.
//
// A store never fails a request: a value it cannot read is missing, a
// value it cannot write is forgotten.
package ttlstore

import "context"

// Store keeps values by key for a fixed time to live.
type Store interface {
	// Get returns the values under keys, in their order, nil for a key
	// with none (never set, expired, evicted, or unreadable), in one round
	// trip. The values may be shared: the caller must not change them.
	Get(ctx context.Context, keys ...string) [][]byte
	// Set stores each entry for the store's time to live, replacing what
	// its key held, in one round trip. The store may keep the values: the
	// caller must not change them afterwards.
	Set(ctx context.Context, entries ...Entry)
	// Delete removes the keys.
	Delete(ctx context.Context, keys ...string)
}

// Entry is a value to store under a key.
type Entry struct {
	Key   string
	Value []byte
}
