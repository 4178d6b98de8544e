package limits

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/systemone/systemone-gateway/internal/redistest"
)

// Every benchmark admits against many organizations, with buckets too large
// to ever refuse, so that each iteration is a full admission (refill, check,
// debit, write) rather than an early refusal.

func benchConfig() Config {
	return Config{RequestsPerMinute: i64(maxLimit), TokensPerSecond: i64(maxLimit), TokenBurst: i64(maxLimit), StoreTimeout: slow}
}

var orgNames = func() []string {
	n := make([]string, 1024)
	for i := range n {
		n[i] = "org-" + strconv.Itoa(i)
	}
	return n
}()

func BenchmarkAdmitInProcess(b *testing.B) {
	l, _ := newLimiter(b, benchConfig(), nil, false)
	i := 0
	for b.Loop() {
		l.Admit(bg, orgNames[i%len(orgNames)], 1500)
		i++
	}
}

func BenchmarkAdmitInProcessParallel(b *testing.B) {
	l, _ := newLimiter(b, benchConfig(), nil, false)
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Admit(bg, orgNames[n.Add(1)%int64(len(orgNames))], 1500)
		}
	})
}

// benchRedis reports the commands the client sent, the script calls the
// server ran and the CPU time it spent (µs), per admission: one command and
// one script call each when admissions come one at a time, fewer of both
// in parallel, where the admissions waiting for a node share one call.
func benchRedis(b *testing.B, parallel bool) {
	srv := redistest.Start(b)
	cfg := benchConfig()
	cfg.OnStoreError = StoreErrorDeny
	l, _ := newLimiter(b, cfg, nil, false, onRedis(srv.URL()))
	hook := &redistest.CountHook{}
	universal(l).AddHook(hook)
	mustAllowB(b, l.Admit(bg, "warm", 1))
	srv.Do("CONFIG", "RESETSTAT")
	cpu := redistest.CPUSeconds(b, srv.Addr)
	hook.Sent.Store(0)
	var n atomic.Int64
	if parallel {
		// 16 goroutines per CPU: bench/load's 32 clients on two cores.
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mustAllowB(b, l.Admit(bg, orgNames[n.Add(1)%int64(len(orgNames))], 1500))
			}
		})
	} else {
		for b.Loop() {
			mustAllowB(b, l.Admit(bg, orgNames[n.Add(1)%int64(len(orgNames))], 1500))
		}
	}
	b.StopTimer()
	calls := redistest.CommandCalls(b, srv.Addr)
	ops := float64(n.Load())
	b.ReportMetric(float64(hook.Sent.Load())/ops, "cmds/op")
	b.ReportMetric(float64(calls["evalsha"]+calls["eval"])/ops, "scripts/op")
	b.ReportMetric((redistest.CPUSeconds(b, srv.Addr)-cpu)*1e6/ops, "redis-cpu-µs/op")
}

func mustAllowB(b *testing.B, d Decision) {
	if !d.Allowed {
		b.Fatalf("refused: %+v", d)
	}
}

func BenchmarkAdmitRedis(b *testing.B)         { benchRedis(b, false) }
func BenchmarkAdmitRedisParallel(b *testing.B) { benchRedis(b, true) }
