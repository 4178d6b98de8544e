package calibrate

import (
	"hash/fnv"
	"math"
)

// A group's walk under MethodAnytime and MethodWeighted: its records in
// entry order (groupView), the walker over them, the projections of
// labels_expected, and the coverage and lower bound the table reports.

// groupView is one group's audited records, in entry order.
type groupView struct {
	sample  *Sample
	records []compactLine
	seed    uint64 // labels_expected's random stream, fixed per group
	expect  bool   // whether to simulate labels_expected (Options.Expect)
	// maxQuestions is Options.MaxQuestions, defaulted.
	maxQuestions int
}

// span is one entry's records in a groupView.
type span struct{ lo, hi int }

// spans splits the records into entries: the runs of one entry id; a
// compactLine without an entry id is an entry of its own.
func (g groupView) spans() []span {
	var out []span
	for lo := 0; lo < len(g.records); {
		hi := lo + 1
		if g.records[lo].is(hasEntry) {
			for hi < len(g.records) && g.records[hi].is(hasEntry) &&
				g.records[hi].entryMs == g.records[lo].entryMs && g.records[hi].entrySeq == g.records[lo].entrySeq {
				hi++
			}
		}
		out = append(out, span{lo, hi})
		lo = hi
	}
	return out
}

// entry reads one entry's lines into buf (a confidence of -1 for a line
// without one), with its draw and whether it was replayed.
func (g groupView) entry(sp span, buf []obsLine) ([]obsLine, Draw, bool) {
	buf = buf[:0]
	for i := sp.lo; i < sp.hi; i++ {
		r := &g.records[i]
		c := -1.0
		if r.is(hasConfidence) {
			c = r.confidence
		}
		buf = append(buf, obsLine{c, r.is(agrees)})
	}
	first := &g.records[sp.lo]
	return buf, g.sample.draws[first.draw], first.is(replayed)
}

// groupSeed derives labels_expected's random stream from the group's
// name, so that the same labels always give the same answer (and
// `/progress` the same as `calibrate --json`).
func groupSeed(k groupKey) uint64 {
	h := fnv.New64a()
	for _, s := range []string{k.model, k.typ, k.question} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	// An org group's and a second stage's own streams; the others' as
	// they were.
	for _, s := range []string{k.org, "from " + k.from} {
		if s != "" && s != "from " {
			h.Write([]byte(s))
			h.Write([]byte{0})
		}
	}
	return h.Sum64()
}

// walkAnytime runs MethodAnytime (or, weighted, MethodWeighted) over one
// group.
func (g groupView) walkAnytime(target, delta float64, weighted bool) Group {
	out := Group{Labels: len(g.records), Top: 1}
	spans := g.spans()
	w := newWalker(target, delta, weighted, g.maxQuestions)
	var buf []obsLine
	top := -1.0
	for _, sp := range spans {
		var draw Draw
		var replay bool
		buf, draw, replay = g.entry(sp, buf)
		for _, l := range buf {
			if l.confidence >= 0 {
				top = max(top, l.confidence)
				out.Scored++
				if l.agree {
					out.ScoredAgree++
				}
			}
		}
		w.observe(buf, draw, replay)
	}
	if top >= 0 {
		out.Top = top
	}
	out.Refused = w.refused
	out.Needs = newWalker(target, delta, weighted, g.maxQuestions).needed(1)
	levels, lowest := w.levels()
	if !w.started {
		out.Why = WhyTooFew
		out.LabelsNeeded = w.needed(out.Top)
		out.LabelsExpected, out.HasLabelsExpected = w.expected(g, spans)
		return out
	}
	k := w.startA
	if lowest >= 0 {
		k = lowest
	}
	e := w.procs[k]
	out.Start = gridValue(w.startA)
	out.Agree, out.N, out.Entries = e.agree, e.n, e.entries
	out.Level = levels[k]
	out.Evidence = math.Exp(min(e.logMax, 709)) // e^709 is near the largest float64
	out.LowerBound, out.HasLowerBound = g.lowerBound(spans, w, k, levels[k], lowest >= 0), true
	if lowest >= 0 {
		out.Threshold, out.HasThreshold = gridValue(k), true
		out.Coverage = g.coverage(gridValue(k), weighted)
		out.HasLabelsExpected = true
		return out
	}
	out.Why = WhyBelowTarget
	out.LabelsNeeded = w.needed(out.Top)
	out.LabelsExpected, out.HasLabelsExpected = w.expected(g, spans)
	return out
}

// coverage is the share of the group's traffic at or above t: the share
// of its lines, each weighed 1/audit_p when weighted.
func (g groupView) coverage(t float64, weighted bool) float64 {
	var at, all float64
	for i := range g.records {
		r := &g.records[i]
		wt := 1.0
		if weighted {
			wt = 1 / g.sample.draws[r.draw].p()
		}
		all += wt
		if r.is(hasConfidence) && r.confidence >= t {
			at += wt
		}
	}
	if all == 0 {
		return 0
	}
	return at / all
}

// lowerBound is the betting lower confidence bound on the agreement at
// candidate k, at the level it was tested at: the largest agreement m
// whose e-process (the same construction, with m for the target) has
// reached 1/level over the group's evidence, found by bisection to 1e-4.
// passed says whether the target itself was rejected: the search then runs
// above it, else below, so that the bound is at or above the target exactly
// when the candidate passed.
func (g groupView) lowerBound(spans []span, w *walker, k int, level float64, passed bool) float64 {
	lo, hi := 0.0, w.target
	if passed {
		lo, hi = w.target, 1
	}
	if level <= 0 {
		return lo
	}
	var buf []obsLine
	rejects := func(m float64) bool {
		e := newEprocess(m)
		seen := 0
		t := gridValue(k)
		for _, sp := range spans {
			var draw Draw
			var replay bool
			buf, draw, replay = g.entry(sp, buf)
			nt, at, scored := 0, 0, false
			for _, l := range buf {
				if l.confidence >= 0 {
					scored = true
				}
				if l.confidence >= t {
					nt++
					if l.agree {
						at++
					}
				}
			}
			if !scored || len(buf) > w.maxQuestions {
				continue
			}
			if seen < w.burn {
				seen++ // a burn-in entry: not evidence
				continue
			}
			if nt == 0 {
				continue
			}
			s := 1.0
			if w.weighted {
				s = draw.floorAt(t, replay) / draw.p()
			}
			e.observe(s*(float64(at)-m*float64(nt))/float64(w.maxQuestions), s, m)
			if e.rejected(level) {
				return true
			}
		}
		return false
	}
	for hi-lo > 1e-4 {
		mid := (lo + hi) / 2
		if rejects(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
