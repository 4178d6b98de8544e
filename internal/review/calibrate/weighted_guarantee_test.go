package calibrate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// The weighted method's guarantee: with probability at least 1 - delta
// over the draw, the true agreement of the traffic's answers at or above
// the chosen threshold is at least target. Each test runs the active
// audit over a known population many times, calibrates each run's drawn
// lines with --method weighted, and computes the truth at the chosen
// threshold exactly from the population.
//
// Tolerance, as in guarantee_test.go: a run fails with some probability
// q <= delta, so the share of failures over R runs has standard deviation
// at most sqrt(delta(1-delta)/R); the tests allow delta + 3 of them (a
// correct method exceeds it with probability about 0.1%), and the seeds
// are fixed, so the outcome does not change between runs.

type weightedRuns struct {
	runs, failures, withThreshold int
	coverage                      float64
}

func runWeighted(g grid, d design, labels, runs int, seed uint64, target, delta float64, method string, strip bool) weightedRuns {
	r := rand.New(rand.NewPCG(seed, 0xac7e))
	g = g.tilted(d)
	var lines []Line
	out := weightedRuns{runs: runs}
	for range runs {
		lines = g.traffic(r, d, labels, lines)
		if strip { // a broken method: the draw forgotten
			for i := range lines {
				lines[i].Draw = Draw{}
			}
		}
		grp := calibrateOne(lines, target, delta, method)
		if !grp.HasThreshold {
			continue
		}
		agreement, coverage := g.truth(grp.Threshold)
		out.withThreshold++
		out.coverage += coverage
		if agreement < target {
			out.failures++
		}
	}
	return out
}

func (w weightedRuns) check(t *testing.T, name string, delta float64) {
	t.Helper()
	share := float64(w.failures) / float64(w.runs)
	limit := delta + 3*math.Sqrt(delta*(1-delta)/float64(w.runs))
	t.Logf("%s: %d runs, %d with a threshold (mean true coverage %.3f); true agreement below target in %d (share %.4f, limit %.4f)",
		name, w.runs, w.withThreshold, w.coverage/float64(max(w.withThreshold, 1)), w.failures, share, limit)
	if share > limit {
		t.Errorf("%s: share of runs below target %.4f > delta %v + 3 sd = %.4f", name, share, delta, limit)
	}
}

// TestWeightedGuarantee: the three curves at targets 0.90 and 0.95, 300
// labels a run, with from 0.1 below the population's best threshold (an
// operator who knows roughly where thresholds fall, from an earlier
// version), and on the late curve also 0.15 above it (from misplaced: the
// walk then passes below from only through the importance-weighted betting
// test).
func TestWeightedGuarantee(t *testing.T) {
	simulationOnly(t)
	t.Parallel()
	const delta = 0.05
	runs := 1000
	if testing.Short() {
		runs = 200
	}
	for _, c := range []curve{logisticCurve, highCurve, lateCurve} {
		g := c.grid()
		for _, target := range []float64{0.9, 0.95} {
			best, coverage := g.best(target)
			t.Logf("%s at %v: best threshold %.2f, coverage %.3f", c.name, target, best, coverage)
			offsets := []float64{-0.1}
			if c.name == lateCurve.name {
				offsets = append(offsets, 0.15)
			}
			for _, offset := range offsets {
				d := design{share: 0.1, floor: 0.01, from: min(max(best+offset, 0), 1)}
				name := fmt.Sprintf("%s, target %v, from %.2f", c.name, target, d.from)
				runWeighted(g, d, 300, runs, uint64(1000*target)+uint64(100*d.from), target, delta, MethodWeighted, false).check(t, name, delta)
			}
		}
	}
}

// TestWeightedGuaranteeFlat is the hardest case for the betting test:
// every answer agrees with probability a hair under the target, so every
// threshold is wrong. With from 1 every candidate below the top is tested
// by the importance-weighted e-process, with weights 1 and 10 mixed; its
// failures must stay under delta too. The same draws calibrated as if
// uniform (the draw forgotten) fail far more often on the late curve:
// the simulation can tell a method that ignores the weights.
func TestWeightedGuaranteeFlat(t *testing.T) {
	simulationOnly(t)
	t.Parallel()
	const delta = 0.05
	runs := 1000
	if testing.Short() {
		runs = 200
	}
	flat := curve{"flat 0.899", func(float64) float64 { return 1 }, func(float64) float64 { return 0.899 }}.grid()
	for _, from := range []float64{1, 0.5} {
		d := design{share: 0.5, floor: 0.05, from: from}
		runWeighted(flat, d, 300, runs, uint64(100*from), 0.9, delta, MethodWeighted, false).check(t, fmt.Sprintf("flat 0.899, target 0.9, from %v", from), delta)
	}

	late := lateCurve.grid()
	best, _ := late.best(0.95)
	d := design{share: 0.1, floor: 0.01, from: best + 0.15}
	naive := runWeighted(late, d, 300, 200, 9, 0.95, delta, MethodUniform, true)
	if share := float64(naive.failures) / float64(naive.runs); share < 2*delta {
		t.Errorf("the late curve's draws calibrated as uniform fall below target in %.3f of runs: the simulation cannot tell a method that ignores the weights", share)
	} else {
		t.Logf("check: the same draws calibrated as if uniform fall below target in %.3f of runs", share)
	}
}
