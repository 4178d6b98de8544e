package redistest

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// CountHook is a go-redis hook that counts what a client sends: Sent is
// round trips (a command or a pipeline each), Scripts the EVAL and EVALSHA
// commands among them. Add it with client.AddHook.
type CountHook struct {
	Sent, Scripts atomic.Int64
	// Except, when set, leaves out of Scripts the scripts it reports
	// true for (a store's health probe, say).
	Except func(redis.Cmder) bool
}

// DialHook implements redis.Hook.
func (h *CountHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *CountHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.Sent.Add(1)
		h.count(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *CountHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.Sent.Add(1)
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h *CountHook) count(cmd redis.Cmder) {
	if n := cmd.Name(); (n == "evalsha" || n == "eval") && (h.Except == nil || !h.Except(cmd)) {
		h.Scripts.Add(1)
	}
}

// HashInts reads fields of the hash at key as integers, nil for a field
// (or a hash) that is not there; it fails the test on any other error.
func HashInts(t testing.TB, c redis.Cmdable, key string, fields ...string) []*int64 {
	t.Helper()
	v, err := c.HMGet(context.Background(), key, fields...).Result()
	if err != nil {
		t.Fatalf("HMGET %s: %v", key, err)
	}
	out := make([]*int64, len(v))
	for i, x := range v {
		if x == nil {
			continue
		}
		n, err := strconv.ParseInt(x.(string), 10, 64)
		if err != nil {
			t.Fatalf("HMGET %s %s: %v", key, fields[i], err)
		}
		out[i] = &n
	}
	return out
}
