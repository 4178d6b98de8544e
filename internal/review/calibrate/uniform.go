package calibrate

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"
)

// MethodUniform: each labelled question one observation, Clopper-Pearson
// lower bounds walked down the confidences in a fixed sequence; valid for
// one look at a number of labels fixed in advance.

// tally is a group's lines as the uniform walk needs them.
type tally struct {
	labels int     // every line, with a confidence or not
	scored []point // the lines with a confidence
}

type point struct {
	confidence float64
	agree      bool
}

// walkUniform runs MethodUniform over one group: each labelled question
// one observation, the group's entries ignored but for counting them.
func (g groupView) walkUniform(target, delta float64) Group {
	m := tally{labels: len(g.records)}
	for i := range g.records {
		if r := &g.records[i]; r.is(hasConfidence) {
			m.scored = append(m.scored, point{r.confidence, r.is(agrees)})
		}
	}
	nmin := MinLines(target, delta)
	out := m.walk(target, delta, nmin)
	out.HasLowerBound, out.Evidence, out.Level, out.Needs = true, out.LowerBound, delta, nmin
	if out.N > 0 {
		t := out.Start
		if out.HasThreshold {
			t = out.Threshold
		}
		var buf []obsLine
		for _, sp := range g.spans() {
			buf, _, _ = g.entry(sp, buf)
			if slices.ContainsFunc(buf, func(l obsLine) bool { return l.confidence >= t }) {
				out.Entries++
			}
		}
	}
	if out.HasThreshold {
		out.HasLabelsExpected = true
	} else if g.expect {
		out.LabelsExpected, out.HasLabelsExpected = g.expectedUniform(m, target, delta)
	}
	return out
}

// walk runs the fixed-sequence walk over one group's lines, and says what a
// group without a threshold lacks.
func (m *tally) walk(target, delta float64, nmin int) Group {
	g := Group{Labels: m.labels}
	cands := candidates(m.scored)
	tested := false
	for _, c := range cands {
		if c.n < nmin {
			continue // above the start: skipped, untested
		}
		lb := LowerBound(c.k, c.n, delta)
		if !tested {
			g.Start = c.confidence
		}
		if lb < target {
			if !tested {
				g.Agree, g.N, g.LowerBound = c.k, c.n, lb
			}
			break
		}
		tested = true
		g.Threshold, g.HasThreshold = c.confidence, true
		g.Agree, g.N, g.LowerBound = c.k, c.n, lb
	}
	if g.HasThreshold {
		g.Coverage = float64(g.N) / float64(g.Labels)
	}
	g.explain(cands, target, delta, nmin)
	return g
}

// explain fills in what a group's walk over cands leaves to say: its top
// confidence and scored lines, and for a group without a threshold why
// not and how many labels it needs. Both methods' walks end with it.
func (g *Group) explain(cands []candidate, target, delta float64, nmin int) {
	g.Top = 1
	if len(cands) > 0 {
		last := cands[len(cands)-1]
		g.Top, g.Scored, g.ScoredAgree = cands[0].confidence, last.n, last.k
	}
	if g.HasThreshold {
		return
	}
	g.Why = WhyTooFew
	if g.N > 0 {
		g.Why = WhyBelowTarget
	}
	g.LabelsNeeded = labelsNeeded(cands, target, delta, nmin)
}

// LowerBound is the one-sided Clopper-Pearson lower bound, at confidence
// 1 - delta, on a proportion of which k successes were seen in n trials:
// the delta quantile of Beta(k, n-k+1), and 0 when k is 0. It panics
// unless 0 <= k <= n.
//
// The quantile is gonum's (mathext.InvRegIncBeta, a port of Cephes' incbi).
// When k == n the quantile has the closed form delta^(1/n), used as is, so
// that the start of the walk agrees exactly with MinLines.
func LowerBound(k, n int, delta float64) float64 {
	if k < 0 || k > n {
		panic(fmt.Sprintf("calibrate: LowerBound(%d, %d): want 0 <= k <= n", k, n))
	}
	switch {
	case k == 0:
		return 0
	case k == n:
		return math.Pow(delta, 1/float64(n))
	}
	return distuv.Beta{Alpha: float64(k), Beta: float64(n - k + 1)}.Quantile(delta)
}

// MinLines is where the walk starts: the fewest lines n at which full
// agreement passes, LowerBound(n, n, delta) = delta^(1/n) >= target, that
// is n >= ceil(ln(delta) / ln(target)). Computed against LowerBound itself,
// so that float error in the logarithms never moves the start by one.
func MinLines(target, delta float64) int {
	n := max(1, int(math.Ceil(math.Log(delta)/math.Log(target))))
	// A step or two at most; bounded, since for a target a hair under 1
	// the steps no longer change the bound.
	for range 2 {
		if n > 1 && LowerBound(n-1, n-1, delta) >= target {
			n--
		}
	}
	for range 2 {
		if LowerBound(n, n, delta) < target {
			n++
		}
	}
	return n
}
