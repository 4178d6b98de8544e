package redistest

import (
	"context"
	"strconv"
	"strings"
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

// CommandCalls is the server at addr's own count of the commands it has
// run, by lower-case name (INFO commandstats: since it started or since
// CONFIG RESETSTAT), so that a test counts scripts where Redis runs them,
// not where a client sends them.
func CommandCalls(t testing.TB, addr string) map[string]int {
	t.Helper()
	calls := map[string]int{}
	for name, fields := range CommandStats(t, addr) {
		calls[name], _ = strconv.Atoi(fields["calls"])
	}
	return calls
}

// CommandStats is the server at addr's INFO commandstats, by lower-case
// command name and field (calls, usec, usec_per_call, ...).
func CommandStats(t testing.TB, addr string) map[string]map[string]string {
	t.Helper()
	stats := map[string]map[string]string{}
	for name, fields := range infoSection(t, addr, "commandstats") {
		m := map[string]string{}
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			m[k] = v
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = m
	}
	return stats
}

// CPUSeconds is the CPU time the server at addr has used, system plus
// user, its main thread and the others (INFO cpu's used_cpu_sys and
// used_cpu_user).
func CPUSeconds(t testing.TB, addr string) float64 {
	t.Helper()
	info := infoSection(t, addr, "cpu")
	var sum float64
	for _, name := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, err := strconv.ParseFloat(info[name], 64)
		if err != nil {
			t.Fatalf("INFO cpu %s: %q", name, info[name])
		}
		sum += v
	}
	return sum
}

// infoSection is one section of the server at addr's INFO, field by field.
func infoSection(t testing.TB, addr, section string) map[string]string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	fields := map[string]string{}
	for line := range strings.Lines(info) {
		if name, value, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[name] = value
		}
	}
	return fields
}
