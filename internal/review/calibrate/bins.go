package calibrate

import (
	"cmp"
	"math"
	"slices"
)

// What a group's labels say, beside its threshold: the agreement per
// confidence bin (a reliability diagram), and the threshold in force as
// the routes of its answers show it. Both describe; neither is the
// guarantee, which is the method's threshold.

// BinCount is the number of confidence bins of a group, each 1/BinCount
// wide, from 0 to 1: [0, 0.1), [0.1, 0.2), ... [0.9, 1].
const BinCount = 10

// wilsonZ is the normal quantile of the bins' 95% Wilson intervals.
const wilsonZ = 1.959963984540054

// InForceWindow is how many of a group's newest audited answers routed
// auto the threshold in force is read from.
const InForceWindow = 20

// Bin is one confidence bin of a group: its labelled audited questions
// with a confidence in [From, To) (the last bin holds 1).
type Bin struct {
	From, To float64
	// N counts the questions, Agree those whose label agrees.
	N, Agree int
	// Agreement is the share that agree, and Lower and Upper its Wilson
	// score interval at 95% (Wilson 1927), each bin on its own. Under
	// MethodWeighted each question weighs 1/audit_p (the Hájek ratio) and
	// the interval takes Kish's effective number of questions. The
	// interval counts questions as independent: a description, not a
	// bound the guarantee rests on.
	Agreement, Lower, Upper float64
}

// InForce is the threshold in force as a group's labels show it: the
// lowest confidence among its InForceWindow newest audited answers that
// the gateway routed auto (whatever --since), and the agreement of the
// group's labelled questions at or above it (after --since).
type InForce struct {
	Threshold float64
	N, Agree  int
}

// binsOf sorts a group's labelled audited records with a confidence into
// bins; weighted weighs each by 1/audit_p. Empty bins are left out.
func (s *Sample) binsOf(records []compactLine, weighted bool) []Bin {
	type sums struct {
		n, agree      int
		w, wAgree, w2 float64
	}
	var acc [BinCount]sums
	for i := range records {
		r := &records[i]
		if r.is(pending) || !r.is(hasConfidence) {
			continue
		}
		b := min(int(r.confidence*BinCount), BinCount-1)
		w := 1.0
		if weighted {
			w = 1 / s.draws[r.draw].p()
		}
		a := &acc[b]
		a.n++
		a.w += w
		a.w2 += w * w
		if r.is(agrees) {
			a.agree++
			a.wAgree += w
		}
	}
	var out []Bin
	for b, a := range acc {
		if a.n == 0 {
			continue
		}
		share := a.wAgree / a.w
		lo, hi := wilson(share, a.w*a.w/a.w2)
		out = append(out, Bin{From: float64(b) / BinCount, To: float64(b+1) / BinCount, N: a.n, Agree: a.agree,
			Agreement: share, Lower: lo, Upper: hi})
	}
	return out
}

// wilson is the Wilson score interval of share p of n observations.
func wilson(p, n float64) (lo, hi float64) {
	z2 := wilsonZ * wilsonZ
	center := (p + z2/(2*n)) / (1 + z2/n)
	half := wilsonZ / (1 + z2/n) * math.Sqrt(p*(1-p)/n+z2/(4*n*n))
	return max(center-half, 0), min(center+half, 1)
}

// markInForce sets each group's InForce: the threshold from the group's
// newest audited lines routed auto among all records (before, the lines
// --since left out, included: after an alarm routes a group human, the
// threshold in force is the one of its answers before), the agreement
// from its records in the window. groups[g] is the group of gs.keys[g],
// ranges[g] its records.
func (s *Sample) markInForce(groups []Group, gs *grouping, ranges []span, before []compactLine) {
	var auto []*compactLine
	for _, part := range [][]compactLine{s.records, before} {
		for i := range part {
			if r := &part[i]; r.is(audited) && r.is(routedAuto) && r.is(hasConfidence) {
				auto = append(auto, r)
			}
		}
	}
	slices.SortFunc(auto, func(a, b *compactLine) int { // newest first
		return cmp.Or(cmp.Compare(b.entryMs, a.entryMs), cmp.Compare(b.entrySeq, a.entrySeq), cmp.Compare(b.index, a.index))
	})
	// The newest lines per type, per question id and per org: a group
	// reads the ones its key names.
	newest := map[groupKey][]float64{}
	for _, r := range auto {
		n := s.names[r.name]
		keys := []groupKey{{n.model, n.typ, "", ""}}
		if n.question != "" {
			keys = append(keys, groupKey{n.model, n.typ, n.question, ""})
		}
		if org := s.orgs[r.org]; org != "" {
			keys = append(keys, groupKey{n.model, n.typ, "", org})
		}
		for _, k := range keys {
			if len(newest[k]) < InForceWindow {
				newest[k] = append(newest[k], r.confidence)
			}
		}
	}
	for g, k := range gs.keys {
		seen := newest[k]
		if len(seen) == 0 {
			continue
		}
		in := &InForce{Threshold: slices.Min(seen)}
		for _, r := range s.records[ranges[g].lo:ranges[g].hi] {
			if !r.is(pending) && r.is(hasConfidence) && r.confidence >= in.Threshold {
				in.N++
				if r.is(agrees) {
					in.Agree++
				}
			}
		}
		groups[g].InForce = in
	}
}
