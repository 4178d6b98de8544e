package monitor

import (
	"math/rand/v2"
	"testing"
)

// The complete prefix in the monitor, simulated on the Ledger at agreement
// exactly the target (simulation_test.go's entries: five questions of one
// state). Time is in minutes; settle 10.

// An entry's questions labelled minutes apart, the disagreements first:
// taken when its first label has settled, the entry would count only its
// first labels, disagreements. Taken once all its questions are noted
// (NoteOf with the entry's total), it counts them all.
func TestSimulationQuestionsLabelledApart(t *testing.T) {
	simulationOnly(t)
	// Disagreements first makes a bad entry's partial observation exactly
	// what its whole is; the breakage needs mixed entries: a bad entry here
	// holds two disagreements among its five, labelled first.
	mixed := func(complete bool) func(rng *rand.Rand) bool {
		return func(rng *rand.Rand) bool {
			l := NewLedger(simParams)
			clock := int64(0)
			for e := range simEntries {
				// Bad with probability 0.25, then 2 of 5 disagree: the
				// share of agreeing answers is 1 - 0.25*0.4 = 0.9.
				bad := rng.Float64() < 0.25
				for i, q := range simQuestions {
					at := clock + int64(i)*20
					total := 0
					if complete {
						total = simQuestion
					}
					l.NoteOf(simKeys[e], at+10, "", total, at, QuestionLabel{Question: q, Member: simMember, Agree: !bad || i >= 2})
					l.Take(at, 1<<30)
				}
				clock += int64(simQuestion) * 20
			}
			l.Take(1<<62, 1<<30)
			return alarmed(l)
		}
	}
	checkShares(t, "an entry's questions labelled 20 minutes apart, disagreements first",
		share(31, simRuns, mixed(true)), share(31, naiveRuns, mixed(false)))
}

// Audited entries put off: the hard ones (one in ten) are left
// unlabelled and labelled together at the end of each day, while the
// day's other entries are labelled and settle. Taking the settled ones past an unlabelled entry, the monitor
// sees the easy ones first and the hard ones in a burst; stopping at the
// horizon (the first audited entry with no label) keeps entry order.
func TestSimulationEntriesPutOff(t *testing.T) {
	simulationOnly(t)
	run := func(horizon bool) func(rng *rand.Rand) bool {
		return func(rng *rand.Rand) bool {
			l := NewLedger(simParams)
			type late struct {
				key string
				at  int64
			}
			var putOff []late
			for e := range simEntries {
				at := int64(e) * 10
				bad := rng.Float64() >= simTarget
				if bad {
					putOff = append(putOff, late{simKeys[e], (at/(24*60) + 1) * 24 * 60})
				} else {
					noteEntry(l, simKeys[e], at+10, "", !bad)
				}
				// Labels put off are given when their time comes.
				for len(putOff) > 0 && putOff[0].at <= at {
					noteEntry(l, putOff[0].key, putOff[0].at+10, "", false)
					putOff = putOff[1:]
				}
				l.Horizon = ""
				if horizon && len(putOff) > 0 {
					l.Horizon = putOff[0].key
				}
				l.Take(at, 1<<30)
			}
			l.Horizon = ""
			for _, p := range putOff {
				noteEntry(l, p.key, p.at+10, "", false)
			}
			l.Take(1<<62, 1<<30)
			return alarmed(l)
		}
	}
	checkShares(t, "the hard entries labelled together at the end of each day",
		share(37, simRuns, run(true)), share(37, naiveRuns, run(false)))
}

// Entries with more questions are easier: one in four holds five
// questions agreeing 0.98, the others one agreeing 0.7667, so that the
// distinct answers agree exactly 0.9, the target, while the entries'
// shares average 0.82. Weighed against max_questions (5), every answer
// counts the same and the bound holds; each entry's share (MaxQuestions
// 0) alarms.
func TestSimulationLongEntriesEasier(t *testing.T) {
	simulationOnly(t)
	run := func(most int) func(rng *rand.Rand) bool {
		return func(rng *rand.Rand) bool {
			p := simParams
			p.MaxQuestions = most
			l := NewLedger(p)
			for e := range simEntries {
				n, agree := 1, 0.7667
				if rng.IntN(4) == 0 {
					n, agree = 5, 0.98
				}
				for _, q := range simQuestions[:n] {
					l.Note(simKeys[e], 0, "", QuestionLabel{Question: q, Member: simMember, Agree: rng.Float64() < agree})
				}
				l.Take(0, 1<<30)
			}
			return alarmed(l)
		}
	}
	checkShares(t, "entries of five questions easier than entries of one, at the target per answer",
		share(41, simRuns, run(simQuestion)), share(41, naiveRuns, run(0)))
}
