package calibrate

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// The guarantee: with probability at least 1 - delta over the audit sample,
// the agreement of answers at or above the chosen threshold is at least
// target. These tests draw many audit samples from a known population,
// calibrate each, and compute the true agreement above each chosen
// threshold exactly from the population: the share of samples whose
// threshold falls short of the target must stay at or under delta.
//
// Tolerance: each run fails independently with some probability q, which
// the guarantee says is at most delta, so the share of failures over R runs
// has mean q and standard deviation at most sqrt(delta(1-delta)/R). The
// tests allow delta + 3 such deviations: a correct method exceeds that with
// probability about 0.1% (normal approximation), and the seeds are fixed, so
// the outcome does not change between runs. A method that spends delta more
// than once overshoots by far more (see the "no stop" check below).

// population is a known distribution of confidences with a known chance of
// agreement at each.
type population struct {
	draw  func(r *rand.Rand) float64 // a confidence
	agree func(c float64) float64    // P(agree | confidence c)
	// truth returns the true agreement of answers with confidence >= t and
	// the share of answers that have one (true coverage).
	truth func(t float64) (agreement, coverage float64)
}

// gridPopulation has confidences on the service's two-decimal grid, 0.00
// to 1.00, drawn uniformly, so ties are common and the truth is an exact
// finite sum.
func gridPopulation(agree func(c float64) float64) population {
	grid := make([]float64, 101)
	for i := range grid {
		grid[i] = float64(i) / 100
	}
	return population{
		draw:  func(r *rand.Rand) float64 { return grid[r.IntN(len(grid))] },
		agree: agree,
		truth: func(t float64) (float64, float64) {
			sum, n := 0.0, 0
			for _, c := range grid {
				if c >= t {
					sum += agree(c)
					n++
				}
			}
			if n == 0 {
				return 1, 0
			}
			return sum / float64(n), float64(n) / float64(len(grid))
		},
	}
}

func logistic(a, b float64) func(c float64) float64 {
	return func(c float64) float64 { return 1 / (1 + math.Exp(-(a + b*c))) }
}

type simulation struct {
	runs, failures, withThreshold int
	coverage, sampleCoverage      float64 // sums over runs with a threshold
}

// simulate calibrates runs audit samples of size n from pop. pick chooses
// the threshold from a sample (Calibrate, or a broken method to show that
// the test can tell).
func simulate(pop population, n, runs int, seed uint64, target, delta float64, pick func([]Line) (float64, float64, bool)) simulation {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	lines := make([]Line, n)
	sim := simulation{runs: runs}
	for range runs {
		for i := range lines {
			c := pop.draw(r)
			lines[i] = Line{Model: "m", Type: "noul", Question: "q", Confidence: c, HasConfidence: true,
				Agree: r.Float64() < pop.agree(c), Audit: true}
		}
		t, sampleCoverage, ok := pick(lines)
		if !ok {
			continue // no threshold: everything goes to a human, never a failure
		}
		agreement, coverage := pop.truth(t)
		sim.withThreshold++
		sim.coverage += coverage
		sim.sampleCoverage += sampleCoverage
		if agreement < target {
			sim.failures++
		}
	}
	return sim
}

func (s simulation) check(t *testing.T, name string, delta float64) {
	t.Helper()
	share := float64(s.failures) / float64(s.runs)
	limit := delta + 3*math.Sqrt(delta*(1-delta)/float64(s.runs))
	covered := max(s.withThreshold, 1)
	t.Logf("%s: %d runs, %d with a threshold; true agreement below target in %d (share %.4f, delta %v, limit %.4f); mean coverage %.3f true, %.3f in the sample",
		name, s.runs, s.withThreshold, s.failures, share, delta, limit,
		s.coverage/float64(covered), s.sampleCoverage/float64(covered))
	if share > limit {
		t.Errorf("%s: share of runs below target %.4f > delta %v + 3 sd = %.4f", name, share, delta, limit)
	}
}

func calibrated(target, delta float64) func([]Line) (float64, float64, bool) {
	return func(lines []Line) (float64, float64, bool) {
		res, err := Calibrate(lines, Options{Target: target, Delta: delta, By: ByType, MinLabels: 1, Method: MethodUniform})
		if err != nil || len(res.Groups) != 1 {
			panic("calibrate failed in the simulation")
		}
		g := res.Groups[0]
		return g.Threshold, g.Coverage, g.HasThreshold
	}
}

// TestGuaranteeLogistic: agreement rises with confidence along a logistic
// curve, as a judge model's usually does; a realistic case.
func TestGuaranteeLogistic(t *testing.T) {
	simulationOnly(t)
	const target, delta = 0.95, 0.05
	pop := gridPopulation(logistic(-2, 8)) // P(agree) 0.12 at 0, 0.5 at 0.25, 0.88 at 0.5, 0.998 at 1
	t.Parallel()
	runs := 1000
	if testing.Short() {
		runs = 200
	}
	// The best threshold knowing the population, for comparison.
	best := 1.0
	for c := 100; c >= 0; c-- {
		if a, _ := pop.truth(float64(c) / 100); a >= target {
			best = float64(c) / 100
		}
	}
	_, bestCoverage := pop.truth(best)
	t.Logf("population: lowest threshold with true agreement >= %v is %v, coverage %.3f", target, best, bestCoverage)
	for _, n := range []int{300, 1000} {
		sim := simulate(pop, n, runs, uint64(n), target, delta, calibrated(target, delta))
		sim.check(t, "logistic, audit sample of "+strconv.Itoa(n), delta)
		if sim.withThreshold < runs/2 {
			t.Errorf("only %d of %d runs found a threshold: the method is uselessly timid here", sim.withThreshold, runs)
		}
	}
}

// TestGuaranteeFlat is the hardest case for the start of the walk: every
// answer agrees with probability a hair under the target, so every
// threshold is wrong and a run fails whenever the walk's first test passes.
// Confidences are continuous, so the first test sees exactly MinLines lines
// and passes with probability 0.899^29 = 0.046: the failure share is close
// to delta, as tight as the method allows.
func TestGuaranteeFlat(t *testing.T) {
	simulationOnly(t)
	const target, delta = 0.9, 0.05
	flat := func(float64) float64 { return 0.899 }
	pop := population{
		draw:  func(r *rand.Rand) float64 { return r.Float64() },
		agree: flat,
		truth: func(t float64) (float64, float64) { return 0.899, 1 - t },
	}
	t.Parallel()
	runs := 2000
	if testing.Short() {
		runs = 400
	}
	sim := simulate(pop, 500, runs, 7, target, delta, calibrated(target, delta))
	sim.check(t, "flat 0.899", delta)

	// The test can tell a method that spends delta on every candidate: the
	// lowest candidate whose bound passes, with no stop at the first failure.
	noStop := func(lines []Line) (float64, float64, bool) {
		// Confidences are continuous here: no ties to take in together.
		sorted := slices.SortedFunc(slices.Values(lines), func(a, b Line) int { return cmp.Compare(b.Confidence, a.Confidence) })
		nmin := MinLines(target, delta)
		best, found, k := 0.0, false, 0
		for i, l := range sorted {
			if l.Agree {
				k++
			}
			if n := i + 1; n >= nmin && LowerBound(k, n, delta) >= target {
				best, found = l.Confidence, true
			}
		}
		return best, 0, found
	}
	broken := simulate(pop, 500, 100, 7, target, delta, noStop)
	if share := float64(broken.failures) / float64(broken.runs); share < 2*delta {
		t.Errorf("a walk that does not stop fails in %.3f of runs: the simulation cannot tell it from a correct one", share)
	} else {
		t.Logf("check: a walk with no stop at the first failure falls below target in %.3f of runs", share)
	}
}
