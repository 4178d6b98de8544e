package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/bench/internal/harness"
	"github.com/systemone/systemone-gateway/bench/payload"
)

// measured is a run of n requests in a second, with the CPU time per
// request in µs of each process named.
func measured(n int, cpu map[string]float64) measure {
	m := measure{res: harness.Result{Requests: n, Elapsed: time.Second}, cpu: map[string]time.Duration{}}
	for p, v := range cpu {
		m.cpu[p] = time.Duration(v * float64(time.Microsecond))
	}
	return m
}

// TestTargets judges the targets on figures made up around each bound:
// each is met on one side and missed on the other, with the figures shown.
func TestTargets(t *testing.T) {
	configs := []string{harness.Plain, harness.Limits, harness.LimitsBudget, harness.LimitsLocal, harness.Guardrails, harness.GuardrailsCached}
	small, err := payload.Get("small-en")
	if err != nil {
		t.Fatal(err)
	}
	plain := map[string]float64{"proxy": 180, "redis": 1, "client": 80}
	var p50Extra time.Duration
	judge := func(runs map[string]measure) string {
		pr := payloadResult{p: small, rate: 1000, runs: map[string]map[string][]measure{closedLoop: {}, openLoop: {}}}
		for c, m := range runs {
			pr.runs[closedLoop][c] = []measure{m}
			pr.runs[openLoop][c] = []measure{m}
		}
		// At the fixed rate, P's p50 is 1 ms; L's is one Redis round
		// trip (1 ms) and p50Extra more.
		pr.runs[openLoop][harness.Plain][0].res.Latencies = []time.Duration{time.Millisecond}
		pr.runs[openLoop][harness.Limits][0].res.Latencies = []time.Duration{2*time.Millisecond + p50Extra}
		var out bytes.Buffer
		b := &bench{o: options{rateShare: 0.3, configs: configs}, out: &out}
		b.targets(&upstreamRun{results: []payloadResult{pr}, rtt: []time.Duration{time.Millisecond}})
		return out.String()
	}
	line := func(out, target string) string {
		for l := range strings.Lines(out) {
			if strings.Contains(l, target) {
				return l
			}
		}
		t.Fatalf("no %q in:\n%s", target, out)
		return ""
	}
	p50Extra = 90 * time.Microsecond
	met := judge(map[string]measure{
		harness.Plain:            measured(1000, plain),
		harness.LimitsLocal:      measured(960, map[string]float64{"proxy": 189, "redis": 1, "client": 80}),
		harness.Limits:           measured(910, map[string]float64{"proxy": 220, "redis": 15, "client": 85, "guardrails": 0}),
		harness.LimitsBudget:     measured(900, map[string]float64{"proxy": 229.5, "redis": 25, "client": 85}),
		harness.Guardrails:       measured(760, map[string]float64{"proxy": 300, "redis": 15, "client": 85, "guardrails": 20}),
		harness.GuardrailsCached: measured(760, map[string]float64{"proxy": 280, "redis": 15, "client": 85}),
	})
	p50Extra = 110 * time.Microsecond
	missed := judge(map[string]measure{
		harness.Plain:            measured(1000, plain),
		harness.LimitsLocal:      measured(940, map[string]float64{"proxy": 191, "redis": 1, "client": 80}),
		harness.Limits:           measured(890, map[string]float64{"proxy": 220, "redis": 17, "client": 85, "guardrails": 0}),
		harness.LimitsBudget:     measured(900, map[string]float64{"proxy": 231, "redis": 25, "client": 85}),
		harness.Guardrails:       measured(740, map[string]float64{"proxy": 300, "redis": 15, "client": 85, "guardrails": 20}),
		harness.GuardrailsCached: measured(730, map[string]float64{"proxy": 280, "redis": 15, "client": 85}),
	})
	for _, tc := range []struct{ target, metFigure, missedFigure string }{
		{"Lm proxy CPU <= P + 10 µs", "Lm +9.0 µs", "Lm +11.0 µs"},
		{"Lm req/s >= 0.95 x P", "0.96", "0.94"},
		{"L added CPU (proxy + redis + client + guardrails) <= P + 60 µs", "+59.0 µs", "+61.0 µs"},
		{"L req/s >= 0.90 x P", "0.91", "0.89"},
		{"L Redis CPU per admitted request <= 15 µs", "+14.0 µs", "+16.0 µs"},
		{"Lb proxy CPU <= L + 10 µs", "+9.5 µs", "+11.0 µs"},
		{"G req/s >= 0.75 x P", "0.76", "0.74"},
		{"GC req/s >= G req/s", "GC ÷ G 1.00", "GC ÷ G 0.99"},
		{"L p50 − P p50 at 1000/s (30% of P's req/s) <= Redis RTT + 0.1 ms", "1.090 ms (RTT 1.000 ms)", "1.110 ms (RTT 1.000 ms)"},
	} {
		if l := line(met, tc.target); !strings.Contains(l, tc.metFigure) || !strings.HasSuffix(strings.TrimSpace(l), "| met |") {
			t.Errorf("want met with %s: %s", tc.metFigure, l)
		}
		if l := line(missed, tc.target); !strings.Contains(l, tc.missedFigure) || !strings.HasSuffix(strings.TrimSpace(l), "| MISSED |") {
			t.Errorf("want MISSED with %s: %s", tc.missedFigure, l)
		}
	}
	if strings.Contains(met, "E ") || strings.Contains(met, "nginx") {
		t.Errorf("rows of configurations not measured:\n%s", met)
	}
}
