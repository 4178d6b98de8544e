package monitor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The monitor as the product uses it, simulated on the Ledger (the Redis
// scripts' arithmetic in process; TestLuaMatchesLedger shows they are the
// same). Each scenario holds the group's auto answers at exactly the
// target (the boundary of the null, where false alarms are likeliest) and
// adds one way the product is used that breaks a naive monitor; the
// monitor's share of runs that ever alarm must stay within alpha, and the
// same runs without the scenario's handling must not (so the test shows
// the handling is what keeps the bound).
//
// Entries hold 5 auto questions of one group that share a state: an entry
// is "bad" with probability 1 - target and then every question disagrees,
// else every one agrees (the strongest correlation; the mean share is
// exactly the target, question by question and entry by entry).

const (
	simTarget   = 0.9
	simAlpha    = 0.05
	simRuns     = 400
	simEntries  = 1000
	simQuestion = 5
	simMember   = "noul:service-1.0.0"
)

var simParams = Params{Target: simTarget, Alpha: simAlpha}

// simKeys are entry keys whose byte order is their number's order.
var simKeys = func() []string {
	keys := make([]string, 40*simEntries)
	for i := range keys {
		keys[i] = fmt.Sprintf("%08d", i)
	}
	return keys
}()

var simQuestions = func() []string {
	qs := make([]string, simQuestion)
	for i := range qs {
		qs[i] = fmt.Sprintf("q%d", i)
	}
	return qs
}()

// noteEntry notes all the entry's questions with one agreement.
func noteEntry(l *Ledger, key string, due int64, requestID string, agree bool) {
	for _, q := range simQuestions {
		l.Note(key, due, requestID, QuestionLabel{Question: q, Member: simMember, Agree: agree})
	}
}

// alarmed reports whether a group's process is in alarm.
func alarmed(l *Ledger) bool { return l.Alarms[simMember] }

// share runs a scenario simRuns times and returns the share of runs that
// ever alarmed; run gets a fresh rng per run and returns whether it alarmed.
// The naive runs, which the test only needs far above alpha, are fewer.
func share(seed uint64, runs int, run func(rng *rand.Rand) bool) float64 {
	alarms := 0
	for i := range runs {
		if run(rand.New(rand.NewPCG(seed, uint64(i)))) {
			alarms++
		}
	}
	return float64(alarms) / float64(runs)
}

// naiveRuns is how many runs show that a scenario breaks a monitor without
// its handling: enough that a share above alpha + tolerance is no fluke.
const naiveRuns = simRuns / 4

// tolerance is three standard errors of a share of simRuns runs at alpha:
// Ville's inequality bounds the true share by alpha (in fact by alpha/2,
// the first sequence's level), so a share above alpha + tolerance is a
// broken bound, not noise.
var tolerance = 3 * math.Sqrt(simAlpha*(1-simAlpha)/simRuns)

func checkShares(t *testing.T, name string, handled, naive float64) {
	t.Helper()
	t.Logf("%s: false alarms %.3f with the handling, %.3f without (alpha %.2f, allowed %.3f)", name, handled, naive, simAlpha, simAlpha+tolerance)
	if handled > simAlpha+tolerance {
		t.Errorf("%s: %.3f of runs alarmed at agreement = target, want <= alpha %.2f (+%.3f)", name, handled, simAlpha, tolerance)
	}
	if naive <= simAlpha+tolerance {
		t.Errorf("%s: without the handling only %.3f of runs alarmed: the scenario does not test it", name, naive)
	}
}

// Correlated questions: the monitor takes one observation per entry (the
// entry's share of agreeing questions); counting each question as an
// observation treats five copies of one state as five pieces of evidence.
func TestSimulationCorrelatedQuestions(t *testing.T) {
	simulationOnly(t)
	run := func(perQuestion bool) func(*rand.Rand) bool {
		return func(rng *rand.Rand) bool {
			l := NewLedger(simParams)
			for i := range simEntries {
				agree := rng.Float64() < simTarget
				if perQuestion {
					for j := range simQuestion {
						l.Note(simKeys[i*simQuestion+j], 0, "", QuestionLabel{Question: "q", Member: simMember, Agree: agree})
					}
				} else {
					noteEntry(l, simKeys[i], 0, "", agree)
				}
				l.Take(0, math.MaxInt)
			}
			return alarmed(l)
		}
	}
	checkShares(t, "correlated questions", share(1, simRuns, run(false)), share(1, naiveRuns, run(true)))
}

// Duplicates: an answer repeated (by a cache in front, a client replaying
// one request, a label exported twice) carries its request id again; the
// monitor counts a (model, request id, question) once. Here a client
// repeats each answer it saw judged wrong five more times, and each copy is
// audited and labelled truthfully.
func TestSimulationDuplicates(t *testing.T) {
	simulationOnly(t)
	run := func(dedup bool) func(*rand.Rand) bool {
		return func(rng *rand.Rand) bool {
			l := NewLedger(simParams)
			key := 0
			for i := range simEntries {
				agree := rng.Float64() < simTarget
				copies := 1
				if !agree {
					copies = 6
				}
				for range copies {
					id := simKeys[i]
					if !dedup {
						id = simKeys[key]
					}
					noteEntry(l, simKeys[key], 0, id, agree)
					key++
				}
				l.Take(0, math.MaxInt)
			}
			return alarmed(l)
		}
	}
	checkShares(t, "duplicates", share(2, simRuns, run(true)), share(2, naiveRuns, run(false)))
}

// Content-dependent label order: a reviewer labels the audited entries in
// sittings of 100, the agreeing ones first and the disagreeing ones last
// (the hard cases left for the end), one label a minute, with settle
// longer than a sitting. The monitor takes each sitting's entries in entry
// order once settled; taken in the order labels were stored, the
// disagreements come in bursts.
func TestSimulationLabelOrder(t *testing.T) {
	simulationOnly(t)
	const sitting, settle = 100, 120 // minutes
	run := func(entryOrder bool) func(*rand.Rand) bool {
		return func(rng *rand.Rand) bool {
			l := NewLedger(simParams)
			clock := int64(0)
			for start := 0; start < simEntries; start += sitting {
				var agreeing, disagreeing []int
				agrees := make([]bool, sitting)
				for i := start; i < start+sitting; i++ {
					agrees[i-start] = rng.Float64() < simTarget
					if agrees[i-start] {
						agreeing = append(agreeing, i)
					} else {
						disagreeing = append(disagreeing, i)
					}
				}
				for n, i := range append(agreeing, disagreeing...) {
					key := simKeys[i]
					if !entryOrder {
						key = simKeys[start+n] // the n-th label of the sitting
					}
					noteEntry(l, key, clock+settle, "", agrees[i-start])
					clock++
					l.Take(clock, math.MaxInt)
				}
				clock += 60 * 12 // until the next sitting
				l.Take(clock, math.MaxInt)
			}
			return alarmed(l)
		}
	}
	checkShares(t, "label order", share(3, simRuns, run(true)), share(3, naiveRuns, run(false)))
}

// Corrections: a reviewer's first label is wrong 5% of the time and is
// corrected ten minutes later; the monitor takes the entry settle (here
// the default, 10 minutes... and a margin: 15) after its first label, with
// the labels current then. Taken at the first label, the errors count.
func TestSimulationCorrections(t *testing.T) {
	simulationOnly(t)
	const correctAfter = 10
	run := func(settle int64) func(*rand.Rand) bool {
		return func(rng *rand.Rand) bool {
			l := NewLedger(simParams)
			clock := int64(0)
			type fix struct {
				at    int64
				i     int
				agree bool
			}
			var fixes []fix
			for i := range simEntries {
				agree := rng.Float64() < simTarget
				first := agree
				if rng.Float64() < 0.05 {
					first = !agree
					fixes = append(fixes, fix{clock + correctAfter, i, agree})
				}
				noteEntry(l, simKeys[i], clock+settle, "", first)
				l.Take(clock, math.MaxInt)
				clock++
				for len(fixes) > 0 && fixes[0].at <= clock {
					noteEntry(l, simKeys[fixes[0].i], fixes[0].at+settle, "", fixes[0].agree)
					fixes = fixes[1:]
				}
				l.Take(clock, math.MaxInt)
			}
			l.Take(math.MaxInt64, math.MaxInt)
			return alarmed(l)
		}
	}
	checkShares(t, "corrections", share(4, simRuns, run(15)), share(4, naiveRuns, run(0)))
}

// Resets: an operator resets the group every 50 entries (40 times over
// its life of 2,000). Each sequence runs at alpha/2^k, so the life's false
// alarms stay within alpha; a reset that started afresh at the same level
// would spend it again every time.
func TestSimulationResets(t *testing.T) {
	simulationOnly(t)
	run := func(spend bool) func(*rand.Rand) bool {
		return func(rng *rand.Rand) bool {
			l := NewLedger(simParams)
			ever := false
			for i := range 2 * simEntries {
				noteEntry(l, simKeys[i], 0, "", rng.Float64() < simTarget)
				l.Take(0, math.MaxInt)
				ever = ever || alarmed(l)
				if (i+1)%50 == 0 {
					l.Reset(simMember)
					if !spend {
						l.States[simMember] = Fresh(simTarget)
					}
				}
			}
			return ever
		}
	}
	checkShares(t, "resets", share(5, simRuns, run(true)), share(5, naiveRuns, run(false)))
}

// Power: the group's entries agree at the target for 200 entries, then
// fall to 0.75; with all the handling above (entries as the unit,
// settle, alpha/2 for the first sequence) the monitor still catches it,
// in every run, within 800 entries of the fall.
func TestSimulationPower(t *testing.T) {
	simulationOnly(t)
	var after []int
	for r := range simRuns {
		rng := rand.New(rand.NewPCG(6, uint64(r)))
		l := NewLedger(simParams)
		caught, before := 0, false
		for i := range simEntries {
			p := simTarget
			if i >= 200 {
				p = 0.75
			}
			noteEntry(l, simKeys[i], int64(i)+10, "", rng.Float64() < p)
			l.Take(int64(i), math.MaxInt)
			if alarmed(l) {
				// Entries taken after the fall (the last ten labelled
				// still settle).
				caught, before = i-10-200+1, i-10 < 200
				break
			}
		}
		if before {
			continue // a false alarm, counted by the tests above
		}
		if caught <= 0 {
			t.Fatalf("run %d: the fall to 0.75 was not caught within %d entries", r, simEntries-200)
		}
		after = append(after, caught)
	}
	slices.Sort(after)
	t.Logf("a fall from 0.90 to 0.75 agreement, 5 questions per entry sharing a state: alarm after a median of %d entries taken (90th percentile %d)", after[len(after)/2], after[len(after)*9/10])
}
