package calibrate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// BenchmarkActiveAudit measures what the active audit saves: the labels
// needed until the chosen threshold's true coverage reaches 80% of the best
// coverage any valid threshold has (the population's), median over
// repetitions, for today's uniform audit calibrated with the uniform method
// (Clopper-Pearson) and for the active audit calibrated with --method
// weighted, on the same curves and targets, delta 0.05. Both audits run
// over the same traffic (paired: an answer drawn by the active audit's
// probability is drawn by the uniform one's too when that is higher), so
// that the comparison is not lost in the spread of the runs. The active audit
// draws 10% at or above from, 1% below (the default floor), with from 0.1
// below the population's best threshold (an operator who knows roughly
// where thresholds fall, from an earlier version). Labels are counted on a
// grid growing 3% a step. It reports labels-uniform, labels-active and
// saving-% (1 - active/uniform); it asserts nothing.
//
//	go test -run '^$' -bench BenchmarkActiveAudit ./internal/review/calibrate/
func BenchmarkActiveAudit(b *testing.B) {
	const delta, reps, most = 0.05, 41, 6000
	for _, c := range []curve{logisticCurve, highCurve, lateCurve} {
		g := c.grid()
		for _, target := range []float64{0.9, 0.95} {
			best, bestCoverage := g.best(target)
			goal := 0.8 * bestCoverage
			d := design{share: 0.1, floor: 0.01, from: max(best-0.1, 0)}
			b.Run(fmt.Sprintf("%s/target=%v", c.name, target), func(b *testing.B) {
				var uniform, active []float64
				for range b.N {
					uniform, active = uniform[:0], active[:0]
					r := rand.New(rand.NewPCG(uint64(1000*target), 7))
					for range reps {
						u, a := g.pairedTraffic(r, d, most)
						uniform = append(uniform, labelsToCoverage(u, g, goal, target, delta, MethodUniform))
						active = append(active, labelsToCoverage(a, g, goal, target, delta, MethodWeighted))
					}
				}
				u, a := median(uniform), median(active)
				b.ReportMetric(u, "labels-uniform")
				b.ReportMetric(a, "labels-active")
				b.ReportMetric(100*(1-a/u), "saving-%")
				b.ReportMetric(100*g.drawnShare(d)/d.share, "drawn-%-of-uniform")
			})
		}
	}
}

// pairedTraffic runs answers through both audits until the uniform one,
// drawing d.share of them, has n lines: one uniform number per answer
// decides both draws. It returns both audits' lines.
func (g grid) pairedTraffic(r *rand.Rand, d design, n int) (uniform, active []Line) {
	for len(uniform) < n {
		c, agree := g.draw(r)
		u := r.Float64()
		if u < d.share {
			uniform = append(uniform, Line{Model: "m", Type: "noul", Question: "q", Confidence: c, HasConfidence: true, Agree: agree, Audit: true})
		}
		if u < d.p(c) {
			active = append(active, d.line(c, agree))
		}
	}
	return uniform, active
}

// labelsToCoverage is the fewest labels, on a grid growing 3% a step, at which
// the first of lines calibrate to a threshold whose true coverage reaches
// goal; len(lines)+1 when none does.
func labelsToCoverage(lines []Line, g grid, goal, target, delta float64, method string) float64 {
	for n := 20; n <= len(lines); n = max(n+1, int(math.Ceil(float64(n)*1.03))) {
		grp := calibrateOne(lines[:n], target, delta, method)
		if !grp.HasThreshold {
			continue
		}
		if _, coverage := g.truth(grp.Threshold); coverage >= goal {
			return float64(n)
		}
	}
	return float64(len(lines) + 1)
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}
