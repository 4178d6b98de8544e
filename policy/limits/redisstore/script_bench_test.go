package redisstore

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/policy/limits/store"
)

// The benchmarks' buckets: the limiter's default rates, with buckets large
// enough that every admission is admitted.
var benchReq, benchTok = func() (store.Spec, store.Spec) {
	req, tok := store.RequestsPerMinute(300), store.TokensPerSecond(1000, 64_000)
	req.Capacity *= 1e6
	tok.Capacity *= 1e6
	return req, tok
}()

// BenchmarkBatchScript measures what one call of batchScript costs Redis
// per admission it carries, by Redis's own account (INFO commandstats),
// one call at a time so that Redis has a core to itself: redis-µs/item is
// the call's time per item, and over-empty-µs/item what is left of it
// once a script that returns at once, given the same KEYS and ARGV, is
// taken off (Redis's per-call machinery and the arguments' tables), and
// commands-µs/item the part of it in the commands the item's Lua calls
// (TIME, HMGET, HSET, PEXPIRE, ...), the rest being Lua's own. The
// admissions are of 20 organizations in turn, each debiting one request
// and 1,500 tokens, holds checked.
func BenchmarkBatchScript(b *testing.B) {
	benchBatch(b, func(i int) *scriptCall {
		org := "{o" + strconv.Itoa(i%20) + "}"
		return &scriptCall{kind: kindAdmit, keys: []string{"b:" + org + ":b"},
			args: []any{"", benchReq.Capacity, benchReq.Rate, benchTok.Capacity, benchTok.Rate, 1, 1500, "1", 0}}
	})
}

// BenchmarkBatchScriptSettle is BenchmarkBatchScript for settlements, as
// the store makes them (each with an id of its own): a budgeted request's
// token correction of 500 tokens, its charge and the release of its
// reservation in a month's budget, of 20 organizations in turn. Run it
// with a fixed -benchtime (2000x): every settlement leaves its id in
// Redis for settledFor.
func BenchmarkBatchScriptSettle(b *testing.B) {
	s := &Store{prefix: "b:"}
	end := time.Now().Add(24 * time.Hour).UnixMicro()
	benchBatch(b, func(i int) *scriptCall {
		sp := store.SpendSettle{Period: "2026-11", End: end, Slot: 1, Charge: 1000, Release: 1000}
		return s.settleCall("o"+strconv.Itoa(i%20), pendingSettle{req: benchReq, tok: benchTok, delta: 500, spend: []store.SpendSettle{sp}}, "")
	})
}

// benchBatch reports what calls of batchScript of 1, 10 and 100 items,
// item(i) the i-th, cost Redis (see BenchmarkBatchScript). The items are
// made again for every call.
func benchBatch(b *testing.B, item func(i int) *scriptCall) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = c.Close() })
	empty := redis.NewScript(`return 1`)
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			calls := make([]*scriptCall, n)
			var pexpire, commands float64
			usec := func(s *redis.Script, times int) float64 {
				if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
					b.Fatal(err)
				}
				for range times {
					for i := range calls {
						calls[i] = item(i)
					}
					keys, args := batchArgs(calls)
					if err := s.Run(bg, c, keys, args...).Err(); err != nil {
						b.Fatal(err)
					}
				}
				all := redistest.CommandStats(b, srv.Addr)
				pexpire, _ = strconv.ParseFloat(all["pexpire"]["calls"], 64)
				commands = 0
				for _, name := range []string{"time", "hmget", "get", "set", "exists", "hget", "hset", "hdel", "hincrby", "pexpire"} {
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
