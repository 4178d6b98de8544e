package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/systemone/systemone-gateway/bench/internal/harness"
	"github.com/systemone/systemone-gateway/bench/payload"
)

// The targets' bounds (BENCHMARKS.md, "The targets"): at fixed
// concurrency, in front of the cheap upstream stub, ratios and differences
// to P measured in the same round; on the small payloads unless said
// otherwise.
const (
	// Lm's req/s over P's, at least; its proxy CPU per request over P's,
	// at most.
	localThroughputRatio = 0.90
	localProxyOverPlain  = 25 * time.Microsecond
	// L's req/s over P's, at least, and Redis's CPU per admitted request
	// over P's (Redis idle), at most.
	limitsThroughputRatio = 0.80
	limitsRedisCPU        = 15 * time.Microsecond
	// L's req/s over P's on the 32 KiB payloads, at least.
	mediumThroughputRatio = 0.85
	// G's req/s over P's, at least.
	guardrailsThroughputRatio = 0.70
)

// addedProcs are the processes whose CPU time the gateway adds to:
// the proxy, Redis, the client (which reads the added headers) and the
// guardrails service. The upstream's is left out: it does the same work
// for every configuration but C, which skips it.
var addedProcs = []string{"proxy", "redis", "client", "guardrails"}

// report prints the tables, the targets and the cost growth.
func (b *bench) report() {
	for i, ur := range b.runs {
		title := "in front of the cheap upstream stub (the headline)"
		if ur.upstream == harness.UpstreamSimulator {
			title = "in front of the simulator (its CPU on this machine too)"
		}
		for _, mode := range []string{closedLoop, openLoop} {
			if mode == closedLoop {
				fmt.Fprintf(b.out, "\n## Fixed concurrency, %s: %d clients, medians of %d rounds of %v\n\n", title, b.o.concurrency, b.o.rounds, b.o.duration)
			} else {
				fmt.Fprintf(b.out, "\n## Fixed rate, %s: %.0f%% of P's fixed-concurrency throughput, medians of %d rounds of %v\n\n", title, 100*b.o.rateShare, b.o.rounds, b.o.duration)
			}
			b.table(ur, mode)
		}
		if i == 0 {
			if b.o.smoke {
				fmt.Fprintf(b.out, "\nsmoke run: too short to judge the targets; BENCHMARKS.md has a full run\n")
			} else {
				b.targets(ur)
			}
		}
		b.escalation(ur)
		b.growth(ur)
	}
}

func (b *bench) table(ur *upstreamRun, mode string) {
	tw := newTable(b.out, "payload", "config", "req/s", "p50 ms", "p99 ms", "req/s ÷ P", "p50 − P ms", "p99 − P ms",
		"proxy CPU µs/req", "proxy − P µs", "added − P µs", "upstream µs/req", "guardrails µs/req", "redis µs/req", "client µs/req",
		"scripts/req", "redis RT/req", "others %")
	for _, pr := range ur.results {
		runs := pr.runs[mode]
		plainCPU := cpuOf(runs[harness.Plain], "proxy")
		for _, c := range b.o.configs {
			ms := runs[c]
			name := ""
			if c == harness.Plain {
				name = pr.p.Name
				if mode == openLoop {
					name += fmt.Sprintf(" @%.0f/s", pr.rate)
				}
			}
			ratio, d50, d99, dcpu, dall := "", "", "", "", ""
			if c != harness.Plain {
				ratio = fmt.Sprintf("%.2f", ratioToPlain(runs, c))
				d50 = fmt.Sprintf("%+.2f", ms2(deltaToPlain(runs, c, 0.50)))
				d99 = fmt.Sprintf("%+.2f", ms2(deltaToPlain(runs, c, 0.99)))
				dcpu = fmt.Sprintf("%+.0f", cpuOf(ms, "proxy")-plainCPU)
				dall = fmt.Sprintf("%+.0f", µs(cpuOver(runs, c, harness.Plain, addedProcs...)))
			}
			tw.row(name, c,
				fmt.Sprintf("%.0f", median(throughputs(ms))),
				fmt.Sprintf("%.2f", ms2(medianDur(ms, func(m measure) time.Duration { return m.res.Percentile(0.50) }))),
				fmt.Sprintf("%.2f", ms2(medianDur(ms, func(m measure) time.Duration { return m.res.Percentile(0.99) }))),
				ratio, d50, d99,
				cpuCell(ms, "proxy"), dcpu, dall, cpuCell(ms, "upstream"), cpuCell(ms, "guardrails"), cpuCell(ms, "redis"), cpuCell(ms, "client"),
				redisCell(ms), readsCell(ms), othersCell(ms))
		}
	}
	tw.flush()
}

// targets judges each target on every payload of its size measured, and
// prints it met or missed with the figures it was judged on. A target whose
// configurations were not measured (-configs) is left out.
func (b *bench) targets(ur *upstreamRun) {
	fmt.Fprintf(b.out, "\n## Targets\n\n")
	tw := newTable(b.out, "target", "payload", "measured", "")
	row := func(pr payloadResult, needs []string, target, measured string, ok bool) {
		for _, c := range needs {
			if !slices.Contains(b.o.configs, c) {
				return
			}
		}
		tw.row(target, pr.p.Name, measured, verdict(ok))
	}
	for _, pr := range ur.results {
		runs := pr.runs[closedLoop]
		l := []string{harness.Limits}
		if pr.p.Size == payload.Medium {
			r := ratioToPlain(runs, harness.Limits)
			row(pr, l, fmt.Sprintf("L req/s >= %.2f x P (32 KiB)", mediumThroughputRatio), fmt.Sprintf("%.2f", r), r >= mediumThroughputRatio)
			continue
		}
		if pr.p.Size != payload.Small {
			continue
		}
		lm := []string{harness.LimitsLocal}
		r := ratioToPlain(runs, harness.LimitsLocal)
		row(pr, lm, fmt.Sprintf("Lm req/s >= %.2f x P", localThroughputRatio), fmt.Sprintf("%.2f", r), r >= localThroughputRatio)
		plain := medianDur(runs[harness.Plain], func(m measure) time.Duration { return m.cpu["proxy"] })
		d := cpuOver(runs, harness.LimitsLocal, harness.Plain, "proxy")
		row(pr, lm, fmt.Sprintf("Lm proxy CPU <= P + %.0f µs", µs(localProxyOverPlain)),
			fmt.Sprintf("P %.0f µs, Lm %+.1f µs", µs(plain), µs(d)), d <= localProxyOverPlain)

		r = ratioToPlain(runs, harness.Limits)
		row(pr, l, fmt.Sprintf("L req/s >= %.2f x P", limitsThroughputRatio), fmt.Sprintf("%.2f", r), r >= limitsThroughputRatio)
		// Every request is admitted (the limits are far above the load and
		// every answer is checked to be a 200); P's Redis CPU is Redis idle.
		d = cpuOver(runs, harness.Limits, harness.Plain, "redis")
		row(pr, l, fmt.Sprintf("L Redis CPU per admitted request <= %.0f µs (over P's)", µs(limitsRedisCPU)),
			fmt.Sprintf("%+.1f µs (%.2f scripts/req)", µs(d), median(scripts(runs[harness.Limits]))), d <= limitsRedisCPU)

		r = ratioToPlain(runs, harness.Guardrails)
		row(pr, []string{harness.Guardrails}, fmt.Sprintf("G req/s >= %.2f x P", guardrailsThroughputRatio), fmt.Sprintf("%.2f", r), r >= guardrailsThroughputRatio)
	}
	tw.flush()
	if len(ur.rtt) > 0 {
		fmt.Fprintf(b.out, "\nRedis RTT: median PING from this program every 5ms during L's fixed-rate runs (%d samples): %.3f ms; p90 %.3f ms\n",
			len(ur.rtt), ms2(medianOf(ur.rtt)), ms2(quantileOf(ur.rtt, 0.9)))
	}
	b.references(ur)
}

// references prints, beside the targets, the rows reported without one:
// exact admission (Lx), every organization leased (La), a budget (Lb),
// the verdict cache (GC), the answer cache (C), everything on (E),
// escalation (X, Xn), the unbuffered log writer (Lu, Lmu) and nginx (N,
// Nl), each with L and Lm for comparison.
func (b *bench) references(ur *upstreamRun) {
	var rows []string
	for _, c := range []string{harness.Limits, harness.LimitsLocal, harness.LimitsExact, harness.LimitsAllowance, harness.LimitsBudget,
		harness.GuardrailsCached, harness.Cached, harness.Everything, harness.Escalated, harness.EscalationIdle,
		harness.LimitsUnbuffered, harness.LimitsLocalUnbuffered, harness.Nginx, harness.NginxLimits} {
		if slices.Contains(b.o.configs, c) {
			rows = append(rows, c)
		}
	}
	if !slices.ContainsFunc(rows, func(c string) bool { return c != harness.Limits && c != harness.LimitsLocal }) {
		return
	}
	fmt.Fprintf(b.out, "\n## Reference rows (fixed concurrency, ratios and differences to P in the same round)\n\n")
	tw := newTable(b.out, "payload", "config", "req/s ÷ P", "proxy − P µs", "redis − P µs", "added − P µs", "p50 − P ms at the fixed rate")
	for _, pr := range ur.results {
		if pr.p.Size != payload.Small {
			continue
		}
		runs := pr.runs[closedLoop]
		for _, c := range rows {
			tw.row(pr.p.Name, c, fmt.Sprintf("%.2f", ratioToPlain(runs, c)),
				fmt.Sprintf("%+.1f", µs(cpuOver(runs, c, harness.Plain, "proxy"))),
				fmt.Sprintf("%+.1f", µs(cpuOver(runs, c, harness.Plain, "redis"))),
				fmt.Sprintf("%+.1f", µs(cpuOver(runs, c, harness.Plain, addedProcs...))),
				fmt.Sprintf("%+.3f", ms2(deltaToPlain(pr.runs[openLoop], c, 0.5))))
		}
	}
	tw.flush()
}

// escalation prints what escalation costs beside L, measured in the same
// round: X, whose second call per request (for a payload with a question
// below the pin's threshold) it adds in the proxy, the client, Redis
// (the second call's admission) and the upstream; and Xn, whose requests
// are looked at for escalation and never escalated, which should add
// nothing.
func (b *bench) escalation(ur *upstreamRun) {
	if !slices.Contains(b.o.configs, harness.Limits) ||
		!slices.Contains(b.o.configs, harness.Escalated) && !slices.Contains(b.o.configs, harness.EscalationIdle) {
		return
	}
	fmt.Fprintf(b.out, "\n## Escalation (%s upstream): differences to L in the same round\n\n", ur.upstream)
	tw := newTable(b.out, "payload", "config", "asked again", "req/s ÷ L", "proxy − L µs", "added − L µs", "upstream − L µs",
		"p50 − L ms", "p99 − L ms", "p50 − L ms at the fixed rate")
	for _, pr := range ur.results {
		runs := pr.runs[closedLoop]
		for _, c := range []string{harness.Escalated, harness.EscalationIdle} {
			if !slices.Contains(b.o.configs, c) {
				continue
			}
			asked := "none"
			if c == harness.Escalated {
				asked = fmt.Sprintf("%d of %d", len(pr.escalation.Asked), pr.escalation.Questions)
			}
			tw.row(pr.p.Name, c, asked, fmt.Sprintf("%.2f", ratioTo(runs, c, harness.Limits)),
				fmt.Sprintf("%+.1f", µs(cpuOver(runs, c, harness.Limits, "proxy"))),
				fmt.Sprintf("%+.1f", µs(cpuOver(runs, c, harness.Limits, addedProcs...))),
				fmt.Sprintf("%+.1f", µs(cpuOver(runs, c, harness.Limits, "upstream"))),
				fmt.Sprintf("%+.3f", ms2(deltaTo(runs, c, harness.Limits, 0.50))),
				fmt.Sprintf("%+.3f", ms2(deltaTo(runs, c, harness.Limits, 0.99))),
				fmt.Sprintf("%+.3f", ms2(deltaTo(pr.runs[openLoop], c, harness.Limits, 0.5))))
		}
	}
	tw.flush()
}

// growth prints how the gateway's own cost (its CPU time per request over
// plain reverse_proxy's) grows with the payload.
func (b *bench) growth(ur *upstreamRun) {
	fmt.Fprintf(b.out, "\n## Cost growth (%s upstream): proxy CPU µs per request over P's, fixed concurrency\n\n", ur.upstream)
	header := []string{"payload", "body KiB", "questions", "P proxy µs/req"}
	for _, c := range b.o.configs[1:] {
		header = append(header, c+" − P")
	}
	tw := newTable(b.out, append(header, "upstream µs/req")...)
	for _, pr := range ur.results {
		runs := pr.runs[closedLoop]
		plain := cpuOf(runs[harness.Plain], "proxy")
		cells := []string{pr.p.Name, fmt.Sprintf("%.1f", float64(len(pr.p.Body))/1024), fmt.Sprint(pr.p.Questions), fmt.Sprintf("%.0f", plain)}
		for _, c := range b.o.configs[1:] {
			cells = append(cells, fmt.Sprintf("%+.0f", cpuOf(runs[c], "proxy")-plain))
		}
		cells = append(cells, fmt.Sprintf("%.0f", cpuOf(runs[harness.Plain], "upstream")))
		tw.row(cells...)
	}
	tw.flush()
	// The slope between the smallest and the largest payload of each
	// language: what one more KiB of body (with its share of questions)
	// costs the gateway beyond what it costs reverse_proxy.
	for _, lang := range []string{payload.English, payload.Chinese} {
		var small, large *payloadResult
		for i := range ur.results {
			pr := &ur.results[i]
			if pr.p.Language != lang {
				continue
			}
			if small == nil || len(pr.p.Body) < len(small.p.Body) {
				small = pr
			}
			if large == nil || len(pr.p.Body) > len(large.p.Body) {
				large = pr
			}
		}
		if small == nil || small == large {
			continue
		}
		kib := float64(len(large.p.Body)-len(small.p.Body)) / 1024
		var parts []string
		for _, c := range b.o.configs {
			added := func(pr *payloadResult) float64 { return cpuOf(pr.runs[closedLoop][c], "proxy") }
			parts = append(parts, fmt.Sprintf("%s %.2f", c, (added(large)-added(small))/kib))
		}
		fmt.Fprintf(b.out, "%s, %s to %s: proxy CPU µs per added KiB: %s\n", lang, small.p.Name, large.p.Name, strings.Join(parts, ", "))
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// ratioToPlain is the median over rounds of c's throughput over P's in the
// same round: drift between rounds hits both alike.
func ratioToPlain(runs map[string][]measure, c string) float64 {
	return ratioTo(runs, c, harness.Plain)
}

// ratioTo is the median over rounds of c's throughput over base's in the
// same round.
func ratioTo(runs map[string][]measure, c, base string) float64 {
	var r []float64
	for i, m := range runs[c] {
		if i < len(runs[base]) {
			r = append(r, m.res.Throughput()/runs[base][i].res.Throughput())
		}
	}
	return median(r)
}

// cpuOver is the median over rounds of c's CPU time per request in procs
// together, less base's in the same round.
func cpuOver(runs map[string][]measure, c, base string, procs ...string) time.Duration {
	sum := func(m measure) time.Duration {
		var t time.Duration
		for _, p := range procs {
			t += m.cpu[p]
		}
		return t
	}
	var d []time.Duration
	for i, m := range runs[c] {
		if i < len(runs[base]) {
			d = append(d, sum(m)-sum(runs[base][i]))
		}
	}
	return medianOf(d)
}

// scripts is the scripts Redis ran per request in each run.
func scripts(ms []measure) []float64 {
	var v []float64
	for _, m := range ms {
		v = append(v, m.redis["evalsha"]+m.redis["eval"])
	}
	return v
}

func µs(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// deltaToPlain is the median over rounds of c's latency at quantile q
// minus P's in the same round.
func deltaToPlain(runs map[string][]measure, c string, q float64) time.Duration {
	return deltaTo(runs, c, harness.Plain, q)
}

// deltaTo is the median over rounds of c's latency at quantile q minus
// base's in the same round.
func deltaTo(runs map[string][]measure, c, base string, q float64) time.Duration {
	var d []time.Duration
	for i, m := range runs[c] {
		if i < len(runs[base]) {
			d = append(d, m.res.Percentile(q)-runs[base][i].res.Percentile(q))
		}
	}
	return medianOf(d)
}

func throughputs(ms []measure) []float64 {
	var t []float64
	for _, m := range ms {
		t = append(t, m.res.Throughput())
	}
	return t
}

func cpuOf(ms []measure, proc string) float64 {
	return float64(medianDur(ms, func(m measure) time.Duration { return m.cpu[proc] })) / float64(time.Microsecond)
}

func cpuCell(ms []measure, proc string) string { return fmt.Sprintf("%.0f", cpuOf(ms, proc)) }

// redisCell is the median number of scripts (EVALSHA or EVAL) Redis ran per
// request. INFO commandstats also counts the commands scripts run, so the
// script calls are the round trips it can tell apart; the MONITOR count
// below tells every command.
func redisCell(ms []measure) string {
	return fmt.Sprintf("%.2f", median(scripts(ms)))
}

// readsCell is the median number of reads Redis did from its clients per
// request: round trips, however many scripts each carried.
func readsCell(ms []measure) string {
	var v []float64
	for _, m := range ms {
		v = append(v, m.redisReads)
	}
	return fmt.Sprintf("%.2f", median(v))
}

// othersCell is the largest share of the CPUs other processes took during
// the runs, in percent.
func othersCell(ms []measure) string {
	var worst float64
	for _, m := range ms {
		worst = max(worst, m.others)
	}
	return fmt.Sprintf("%.0f", 100*worst)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianDur(ms []measure, f func(measure) time.Duration) time.Duration {
	var d []time.Duration
	for _, m := range ms {
		d = append(d, f(m))
	}
	return medianOf(d)
}

func medianOf(d []time.Duration) time.Duration {
	v := make([]float64, len(d))
	for i, x := range d {
		v[i] = float64(x)
	}
	return time.Duration(median(v))
}

func quantileOf(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

func ms2(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// table writes aligned columns, as Markdown-compatible rows.
type table struct{ tw *tabwriter.Writer }

func newTable(out io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(out, 0, 0, 1, ' ', 0)}
	t.row(header...)
	sep := make([]string, len(header))
	for i, h := range header {
		sep[i] = strings.Repeat("-", max(len([]rune(h)), 3))
	}
	t.row(sep...)
	return t
}

func (t *table) row(cells ...string) {
	fmt.Fprintf(t.tw, "| %s |\n", strings.Join(cells, "\t| "))
}

func (t *table) flush() { _ = t.tw.Flush() }
