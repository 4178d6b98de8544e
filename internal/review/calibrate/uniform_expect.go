package calibrate

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
)

// uniformExpectMaxLines bounds the groups whose labels_expected the
// uniform method simulates: a larger group reports none.
const uniformExpectMaxLines = 200_000

// expectedUniform is labels_expected under MethodUniform: the median,
// over resampled futures (entries drawn at random, with replacement, from
// the group's own), of the more entries until the walk finds a threshold,
// checked at checkpoints about 5% apart, so the figure is that coarse.
//
// The walk has a threshold exactly when its first tested candidate (the
// highest confidence with at least MinLines lines at or above it)
// passes, and the futures only draw the group's own lines, so no
// confidence but the group's ever appears: a checkpoint counts the lines
// at each of the group's confidences and bounds one candidate, rather
// than sorting every line again (TestExpectedUniformMatchesWalk holds it
// to the walk). Once more than half the futures have failed the median
// is "never", and the rest are not run.
func (g groupView) expectedUniform(m tally, target, delta float64) (int, bool) {
	spans := g.spans()
	if len(spans) == 0 || m.labels > uniformExpectMaxLines {
		return 0, false
	}
	nmin := MinLines(target, delta)
	rng := rand.New(rand.NewPCG(g.seed, 0x5eed))
	horizon := min(expectHorizon, max(10*len(spans), 10*nmin))

	// The group's confidences, highest first, and the lines at each.
	var confs []float64
	for _, p := range m.scored {
		confs = append(confs, p.confidence)
	}
	slices.SortFunc(confs, func(a, b float64) int { return cmp.Compare(b, a) })
	confs = slices.Compact(confs)
	place := func(c float64) int {
		i, _ := slices.BinarySearchFunc(confs, c, func(a, c float64) int { return cmp.Compare(c, a) })
		return i
	}
	var n0, k0 []int
	n0, k0 = make([]int, len(confs)), make([]int, len(confs))
	for _, p := range m.scored {
		i := place(p.confidence)
		n0[i]++
		if p.agree {
			k0[i]++
		}
	}
	// Each entry's scored lines, as the places of their confidences, the
	// agreeing ones marked: one slice over all entries.
	type drawnLine struct {
		place int
		agree bool
	}
	var lines []drawnLine
	ends := make([]int, len(spans))
	var buf []obsLine
	for i, sp := range spans {
		buf, _, _ = g.entry(sp, buf)
		for _, l := range buf {
			if l.confidence >= 0 {
				lines = append(lines, drawnLine{place(l.confidence), l.agree})
			}
		}
		ends[i] = len(lines)
	}

	counts := make([]int, 0, expectations)
	passes := boundPasses{}
	n, k := make([]int, len(confs)), make([]int, len(confs))
	never := 0
	for range expectations {
		copy(n, n0)
		copy(k, k0)
		drawn, found := 0, false
		for next := 1; drawn < horizon && !found; next = max(next+1, next*21/20) {
			for ; drawn < next; drawn++ {
				e := rng.IntN(len(spans))
				lo := 0
				if e > 0 {
					lo = ends[e-1]
				}
				for _, l := range lines[lo:ends[e]] {
					n[l.place]++
					if l.agree {
						k[l.place]++
					}
				}
			}
			found = firstCandidatePasses(n, k, target, delta, nmin, passes)
		}
		if !found {
			drawn = math.MaxInt
			if never++; never > expectations/2 {
				return math.MaxInt, false // the median is already "never"
			}
		}
		counts = append(counts, drawn)
	}
	slices.Sort(counts)
	med := counts[len(counts)/2]
	return med, med != math.MaxInt
}

// firstCandidatePasses reports whether the uniform walk over lines counted
// by confidence (n and k at each, highest first) finds a threshold: its
// first tested candidate, the highest with nmin lines at or above it,
// has a lower bound at or above the target.
func firstCandidatePasses(n, k []int, target, delta float64, nmin int, passes boundPasses) bool {
	nt, kt := 0, 0
	for i := range n {
		nt, kt = nt+n[i], kt+k[i]
		if nt >= nmin {
			return passes.at(kt, nt, target, delta)
		}
	}
	return false
}

// boundPasses remembers, by (k, n), whether LowerBound(k, n, delta)
// reaches the target: the futures of one group meet the same counts again
// and again.
type boundPasses map[[2]int]bool

func (m boundPasses) at(k, n int, target, delta float64) bool {
	ok, seen := m[[2]int{k, n}]
	if !seen {
		ok = LowerBound(k, n, delta) >= target
		m[[2]int{k, n}] = ok
	}
	return ok
}
