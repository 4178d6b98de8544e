package redisstore

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/policy/limits/store"
)

// BenchmarkBatchScript measures what one call of batchScript costs Redis
// per admission it carries, by Redis's own account (INFO commandstats),
// one call at a time so that Redis has a core to itself: redis-µs/item is
// the call's time per item, and over-empty-µs/item what is left of it
// once a script that returns at once, given the same KEYS and ARGV, is
// taken off (Redis's per-call machinery and the arguments' tables), and
// commands-µs/item the part of it in the commands the item's Lua calls
// (TIME, HMGET, HSET, PEXPIRE), the rest being Lua's own. The
// admissions are of 20 organizations in turn, with the limiter's default
// buckets' rates and buckets large enough that every one is admitted, each
// debiting one request and 1,500 tokens, holds checked.
func BenchmarkBatchScript(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = c.Close() })
	empty := redis.NewScript(`return 1`)
	req, tok := store.RequestsPerMinute(300), store.TokensPerSecond(1000, 64_000)
	req.Capacity *= 1e6
	tok.Capacity *= 1e6
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			calls := make([]*scriptCall, n)
			for i := range calls {
				org := "{o" + strconv.Itoa(i%20) + "}"
				calls[i] = &scriptCall{kind: kindAdmit, keys: []string{"b:" + org + ":b"},
					args: []any{"", req.Capacity, req.Rate, tok.Capacity, tok.Rate, 1, 1500, "1", 0}}
			}
			keys, args := batchArgs(calls)
			var pexpire, commands float64
			usec := func(s *redis.Script, times int) float64 {
				if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
					b.Fatal(err)
				}
				for range times {
					if err := s.Run(bg, c, keys, args...).Err(); err != nil {
						b.Fatal(err)
					}
				}
				all := redistest.CommandStats(b, srv.Addr)
				pexpire, _ = strconv.ParseFloat(all["pexpire"]["calls"], 64)
				commands = 0
				for _, name := range []string{"time", "hmget", "get", "hset", "pexpire"} {
					v, _ := strconv.ParseFloat(all[name]["usec"], 64)
					commands += v
				}
				stats := all["evalsha"]
				v, err := strconv.ParseFloat(stats["usec"], 64)
				if err != nil {
					b.Fatalf("commandstats evalsha %v", stats)
				}
				return v
			}
			b.ResetTimer()
			used := usec(batchScript, b.N)
			b.StopTimer()
			b.ReportMetric(pexpire/float64(b.N*n), "pexpire/item")
			b.ReportMetric(commands/float64(b.N*n), "commands-µs/item")
			base := usec(empty, b.N)
			items := float64(b.N * n)
			b.ReportMetric(used/items, "redis-µs/item")
			b.ReportMetric((used-base)/items, "over-empty-µs/item")
		})
	}
}
