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
	configs := []string{harness.Plain, harness.Limits, harness.LimitsLocal, harness.Guardrails}
	small, err := payload.Get("small-en")
	if err != nil {
		t.Fatal(err)
	}
	medium, err := payload.Get("32k-en")
	if err != nil {
		t.Fatal(err)
	}
	plain := map[string]float64{"proxy": 180, "redis": 1, "client": 80}
	judge := func(runs, mediumRuns map[string]measure) string {
		result := func(p payload.Payload, runs map[string]measure) payloadResult {
			pr := payloadResult{p: p, rate: 1000, runs: map[string]map[string][]measure{closedLoop: {}, openLoop: {}}}
			for c, m := range runs {
				pr.runs[closedLoop][c] = []measure{m}
				pr.runs[openLoop][c] = []measure{m}
			}
			return pr
		}
		var out bytes.Buffer
		b := &bench{o: options{rateShare: 0.3, configs: configs}, out: &out}
		b.targets(&upstreamRun{results: []payloadResult{result(small, runs), result(medium, mediumRuns)}, rtt: []time.Duration{time.Millisecond}})
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
	met := judge(map[string]measure{
		harness.Plain:       measured(1000, plain),
		harness.LimitsLocal: measured(910, map[string]float64{"proxy": 204, "redis": 1, "client": 80}),
		harness.Limits:      measured(810, map[string]float64{"proxy": 220, "redis": 15, "client": 85}),
		harness.Guardrails:  measured(710, map[string]float64{"proxy": 300, "redis": 15, "client": 85, "guardrails": 20}),
	}, map[string]measure{
		harness.Plain:  measured(1000, plain),
		harness.Limits: measured(860, map[string]float64{"proxy": 220, "redis": 5, "client": 85}),
	})
	missed := judge(map[string]measure{
		harness.Plain:       measured(1000, plain),
		harness.LimitsLocal: measured(890, map[string]float64{"proxy": 206, "redis": 1, "client": 80}),
		harness.Limits:      measured(790, map[string]float64{"proxy": 220, "redis": 17, "client": 85}),
		harness.Guardrails:  measured(690, map[string]float64{"proxy": 300, "redis": 15, "client": 85, "guardrails": 20}),
	}, map[string]measure{
		harness.Plain:  measured(1000, plain),
		harness.Limits: measured(840, map[string]float64{"proxy": 220, "redis": 5, "client": 85}),
	})
	for _, tc := range []struct{ target, metFigure, missedFigure string }{
		{"Lm req/s >= 0.90 x P", "0.91", "0.89"},
		{"Lm proxy CPU <= P + 25 µs", "Lm +24.0 µs", "Lm +26.0 µs"},
		{"L req/s >= 0.80 x P ", "0.81", "0.79"},
		{"L Redis CPU per admitted request <= 15 µs", "+14.0 µs", "+16.0 µs"},
		{"L req/s >= 0.85 x P (32 KiB)", "0.86", "0.84"},
		{"G req/s >= 0.70 x P", "0.71", "0.69"},
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
