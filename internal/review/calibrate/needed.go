package calibrate

import (
	"cmp"
	"math"
	"slices"
)

// Why a group has no threshold, in Group.Why.
const (
	// WhyTooFew: no candidate has enough lines at or above it
	// (MinLines), so none was tested.
	WhyTooFew = "too_few"
	// WhyBelowTarget: the first candidate tested has a lower bound below
	// the target, which ends the walk.
	WhyBelowTarget = "below_target"
)

// candidate is one step of the walk: the lines at or above a confidence.
type candidate struct {
	confidence float64
	n, k       int
}

// candidates sorts the scored points from the highest confidence down and
// returns one candidate per distinct confidence, with the cumulative counts
// of lines at or above it.
func candidates(scored []point) []candidate {
	slices.SortFunc(scored, func(a, b point) int { return cmp.Compare(b.confidence, a.confidence) })
	var out []candidate
	n, k := 0, 0
	for i := 0; i < len(scored); {
		t := scored[i].confidence
		for ; i < len(scored) && scored[i].confidence == t; i++ {
			n++
			if scored[i].agree {
				k++
			}
		}
		out = append(out, candidate{t, n, k})
	}
	return out
}

// labelsNeeded is the documented `labels_needed` for a group without a
// threshold: the smallest m >= 0 such that m more audited lines, all
// agreeing and all at the group's highest confidence (at 1 when no line has
// a confidence), would give the group a threshold under the walk.
//
// Such lines tie with the top candidate, so every candidate's n and k grow
// by m. The walk then has a threshold exactly when its first tested
// candidate passes: the highest one with n + m >= nmin. As m grows that
// start moves up, one candidate at a time, so m splits into segments with
// one start each. Within a segment the start's bound LB(k+m, n+m) only
// rises with m (more successes, the same failures), so the first passing m
// of a segment is found by bisection; across segments it need not be
// monotone (a higher start can hold a disagreement a lower one diluted),
// hence the segments are searched in order of m. The result equals a
// search over m = 0, 1, 2, ... with the real walk (TestLabelsNeededBrute).
func labelsNeeded(cands []candidate, target, delta float64, nmin int) int {
	if len(cands) == 0 {
		// m lines at confidence 1 form the only candidate, all agreeing:
		// they pass exactly from MinLines on.
		return nmin
	}
	passes := func(c candidate, m int) bool {
		return LowerBound(c.k+m, c.n+m, delta) >= target
	}
	// Candidate i starts the walk for m in [nmin - n_i, nmin - n_(i-1)),
	// clipped to m >= 0; the top one (i = 0) from nmin - n_0 on, unbounded.
	for i := len(cands) - 1; i >= 0; i-- {
		c := cands[i]
		lo := max(0, nmin-c.n)
		if i == 0 {
			return firstPass(lo, -1, func(m int) bool { return passes(c, m) })
		}
		hi := nmin - cands[i-1].n // exclusive
		if lo >= hi {
			continue // this candidate starts no walk at any m >= 0
		}
		if m := firstPass(lo, hi, func(m int) bool { return passes(c, m) }); m >= 0 {
			return m
		}
	}
	panic("unreachable: the top candidate's segment is unbounded")
}

// firstPass returns the smallest m in [lo, hi) with ok(m), for ok false
// then true over the range (monotone), or -1 when there is none. hi < 0
// means no upper end: the range is searched by doubling, and ok must turn
// true eventually.
func firstPass(lo, hi int, ok func(int) bool) int {
	if hi < 0 {
		step := 1
		for hi = lo; !ok(hi); step = min(2*step, math.MaxInt/4) {
			if hi > math.MaxInt/2 {
				return hi // unreachable with a finite bound; never an overflow
			}
			lo, hi = hi+1, hi+step
		}
		hi++ // ok(hi-1): search [lo, hi)
	} else if !ok(hi - 1) {
		return -1
	}
	// Invariant: ok(hi-1), and not ok(m) for m < lo.
	for lo < hi-1 {
		mid := lo + (hi-1-lo)/2
		if ok(mid) {
			hi = mid + 1
		} else {
			lo = mid + 1
		}
	}
	return lo
}
