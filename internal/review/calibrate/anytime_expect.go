package calibrate

import (
	"math"
	"math/rand/v2"
	"slices"
)

// labels_expected under MethodAnytime and MethodWeighted: resampled
// futures of a group, each followed only as far as hasThreshold needs.

// expectations is how many times labels_expected resamples a group's
// future (odd, for the median), and expectHorizon the most more entries
// each run may take before it counts as never reaching a threshold.
const (
	expectations  = 31
	expectHorizon = 20000
)

// expected is labels_expected: the median, over resampled futures, of the
// more entries until the group has a threshold, each future drawing
// entries at random (with replacement) from the group's own entries.
// false when there are none or the median future does not reach one
// within the horizon.
//
// A future is the walker's, entry by entry, but once the starts are set
// only the starts' e-processes are fed: hasThreshold reads nothing else,
// and each candidate's e-process depends on its own observations alone,
// so the count is the one the whole walk gives (TestExpectedMatchesWalk
// holds it to that). Each entry's observations at the starts are
// computed once (startFeeds), not at every draw of it. Once more than
// half the futures have failed the median is "never", and the rest are
// not run.
func (w *walker) expected(g groupView, spans []span) (int, bool) {
	if w.hasThreshold() {
		return 0, true
	}
	if len(spans) == 0 || !g.expect {
		return 0, false
	}
	rng := rand.New(rand.NewPCG(g.seed, 0x5eed))
	horizon := min(expectHorizon, max(10*len(spans), 100*w.burn))
	counts := make([]int, 0, expectations)
	feeds := map[[2]int][]startFeed{} // by the starts (startA, startS)
	var buf []obsLine
	never := 0
	for range expectations {
		c := w.clone()
		var feed []startFeed
		n := 0
		for n < horizon && !c.hasThreshold() {
			i := rng.IntN(len(spans))
			n++
			if !c.started { // the burn-in: its entries set the starts
				var draw Draw
				var replay bool
				buf, draw, replay = g.entry(spans[i], buf)
				c.observe(buf, draw, replay)
				continue
			}
			if feed == nil {
				starts := [2]int{c.startA, c.startS}
				if feeds[starts] == nil {
					feeds[starts] = c.startFeeds(g, spans)
				}
				feed = feeds[starts]
			}
			f := &feed[i]
			if f.feeds[0] {
				c.procs[c.startA].observe(f.y[0], f.s[0], c.target)
			}
			if f.feeds[1] {
				c.procs[c.startS].observe(f.y[1], f.s[1], c.target)
			}
		}
		if !c.hasThreshold() {
			n = math.MaxInt
			if never++; never > expectations/2 {
				// More than half the futures never reach one: the
				// median is already "never", whatever the rest do.
				return math.MaxInt, false
			}
		}
		counts = append(counts, n)
	}
	slices.Sort(counts)
	med := counts[len(counts)/2]
	return med, med != math.MaxInt
}

// startFeed is what one entry gives the starts' e-processes (A, then S
// when it differs from A): the observation y and scale s of each it
// feeds, as observe would compute them.
type startFeed struct {
	y, s  [2]float64
	feeds [2]bool
}

// startFeeds computes each entry's startFeed for the walker's starts.
func (w *walker) startFeeds(g groupView, spans []span) []startFeed {
	out := make([]startFeed, len(spans))
	var buf []obsLine
	for i, sp := range spans {
		var draw Draw
		var replay bool
		buf, draw, replay = g.entry(sp, buf)
		if len(buf) == 0 || len(buf) > w.maxQuestions {
			continue // refused, or nothing: observe feeds no candidate
		}
		top := -1.0
		for _, l := range buf {
			top = max(top, l.confidence)
		}
		if top < 0 {
			continue // no question with a confidence
		}
		total := w.entryTotal(buf)
		for slot, k := range [2]int{w.startA, w.startS} {
			if slot == 1 && w.startS == w.startA {
				break
			}
			t := gridValue(k)
			nt, at := 0, 0
			for _, l := range buf {
				if l.confidence >= t {
					nt++
					if l.agree {
						at++
					}
				}
			}
			if nt > 0 {
				f := &out[i]
				f.y[slot], f.s[slot] = w.observation(k, nt, at, total, draw, replay)
				f.feeds[slot] = true
			}
		}
	}
	return out
}
