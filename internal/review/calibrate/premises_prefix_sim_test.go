package calibrate

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The premises of "Order and timing", "Passes", "Corrections" and "Per
// answer, whatever the entry's size", simulated as a review team labels:
// entries arrive in the stream day by day, people label them hours or
// days later, in whatever order, correct some, pass some; someone runs
// calibrate at every look (daily, or after every label) with the default
// correction window, on an export taken then (each question's label as it
// stood at the look, a pending line for a question not labelled yet).
// Agreement is below the target at every confidence, so any threshold is
// wrong: the share of runs that ever report one must stay within delta
// plus three standard errors. Each test also runs the scenario with its
// handling removed (the complete prefix, or the weights against
// max_questions, or passes counted as disagreements) and shows that the
// share then exceeds the bound: the handling is what holds it.

// labelEvent is a label stored for one question at a time.
type labelEvent struct {
	at    time.Time
	agree bool
	pass  bool
}

// timedQuestion is one question of a simulated entry and its labels.
type timedQuestion struct {
	confidence float64
	events     []labelEvent
}

// timedEntry is one audited entry: when it was queued, its questions.
type timedEntry struct {
	arrive    time.Time
	questions []timedQuestion
}

var simStart = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

// exportAt is what GET /labels holds at the look: the entries queued by
// then, each question with its newest label stored by then, or a pending
// line.
func exportAt(entries []timedEntry, look time.Time) []Line {
	var out []Line
	for e, en := range entries {
		if en.arrive.After(look) {
			break
		}
		for q, tq := range en.questions {
			l := simLine(e, q, tq.confidence, false)
			l.Pending = true
			for _, ev := range tq.events {
				if ev.at.After(look) {
					continue
				}
				if l.Pending || ev.at.UnixNano() >= l.Labelled {
					l.Pending, l.Agree, l.Pass, l.Labelled = false, ev.agree && !ev.pass, ev.pass, ev.at.UnixNano()
				}
			}
			out = append(out, l)
		}
	}
	return out
}

// lookShare runs scenario runs times and returns the share of runs in
// which calibrate reported a threshold at any look, looks every `every`
// from the first entry to `until` after it.
func lookShare(t *testing.T, runs int, every, until time.Duration, opts Options, scenario func(r *rand.Rand) []timedEntry) float64 {
	t.Helper()
	failed := 0
	for run := range runs {
		entries := scenario(rand.New(rand.NewPCG(uint64(run), 2031)))
		for look := simStart.Add(every); !look.After(simStart.Add(until)); look = look.Add(every) {
			o := opts
			o.AsOf = look
			res, err := Calibrate(exportAt(entries, look), o)
			if err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(res.Groups, func(g Group) bool { return g.HasThreshold }) {
				failed++
				break
			}
		}
	}
	return float64(failed) / float64(runs)
}

// timingOpts are calibrate's defaults at the simulations' target and
// delta, one question per entry declared (max_questions 1).
func timingOpts() Options {
	o := DefaultOptions()
	o.Target, o.Delta, o.MinLabels, o.Expect, o.MaxQuestions = simTarget, simDelta, 1, false, 1
	return o
}

// withAndWithout runs a scenario with the handling in place and without
// it (off sets the package's flag for the second run), and checks that the
// first holds the bound and the second does not.
func withAndWithout(t *testing.T, name string, runs int, share func() float64, off *bool) {
	t.Helper()
	bound := simBound(runs)
	held := share()
	*off = true
	broken := share()
	*off = false
	t.Logf("%s, %d runs: wrong thresholds %.3f (bound %.3f); without the handling %.3f", name, runs, held, bound, broken)
	if held > bound {
		t.Errorf("%s: %.3f above %.3f", name, held, bound)
	}
	if broken <= bound {
		t.Errorf("%s without the handling: %.3f, not above %.3f: the simulation does not show the premise", name, broken, bound)
	}
}

// arrivals queues n one-question entries, perDay a day, each agreeing
// with probability p, confidence uniform; label says when each is
// labelled (and how).
func arrivals(r *rand.Rand, n, perDay int, p float64, label func(r *rand.Rand, arrive time.Time, agree bool) []labelEvent) []timedEntry {
	out := make([]timedEntry, n)
	for e := range out {
		arrive := simStart.Add(time.Duration(e) * 24 * time.Hour / time.Duration(perDay))
		agree := r.Float64() < p
		out[e] = timedEntry{arrive: arrive, questions: []timedQuestion{{confidence: r.Float64(), events: label(r, arrive, agree)}}}
	}
	return out
}

func hours(r *rand.Rand, lo, hi float64) time.Duration {
	return time.Duration((lo + (hi-lo)*r.Float64()) * float64(time.Hour))
}

// Hard entries labelled later: the agreeing ones within hours, the
// disagreeing ones (the hard calls) two to ten days later; calibrate run
// every day. Agreement 0.88.
func TestPremiseLateHardLabels(t *testing.T) {
	simulationOnly(t)
	runs := simRuns(60, 1000)
	scenario := func(r *rand.Rand) []timedEntry {
		return arrivals(r, 600, 40, 0.88, func(r *rand.Rand, at time.Time, agree bool) []labelEvent {
			if agree {
				return []labelEvent{{at: at.Add(hours(r, 0, 8)), agree: true}}
			}
			return []labelEvent{{at: at.Add(hours(r, 48, 240)), agree: false}}
		})
	}
	withAndWithout(t, "hard entries labelled days later, daily looks", runs, func() float64 {
		return lookShare(t, runs, 24*time.Hour, 25*24*time.Hour, timingOpts(), scenario)
	}, &prefixOff)
}

// Corrections: a hurried first pass labels 90% of the disagreements as
// agreeing, and a second pass corrects them: next day (within the default
// window) or seven days later (within an eight-day window). Looks every
// 12 hours. Agreement 0.85 (0.985 at first pass).
func TestPremiseCorrectionsWithLooks(t *testing.T) {
	simulationOnly(t)
	runs := simRuns(60, 1000)
	for _, tc := range []struct {
		name          string
		after         [2]float64 // hours after the first label
		correctWithin time.Duration
		// shows is false where the looks see too few uncorrected labels
		// for the walk without the prefix to fail: there the test checks
		// the bound and logs the other figure.
		shows bool
	}{
		{"90% of disagreements first labelled agreeing, corrected the next day", [2]float64{2, 22}, 24 * time.Hour, false},
		{"90% of disagreements first labelled agreeing, corrected 7 days later (window 8 days)", [2]float64{7 * 24, 7*24 + 8}, 8 * 24 * time.Hour, true},
	} {
		scenario := func(r *rand.Rand) []timedEntry {
			return arrivals(r, 600, 80, 0.85, func(r *rand.Rand, at time.Time, agree bool) []labelEvent {
				first := at.Add(hours(r, 0, 6))
				if agree || r.Float64() >= 0.9 {
					return []labelEvent{{at: first, agree: agree}}
				}
				return []labelEvent{{at: first, agree: true}, {at: first.Add(hours(r, tc.after[0], tc.after[1]))}}
			})
		}
		opts := timingOpts()
		opts.CorrectWithin = tc.correctWithin
		share := func() float64 { return lookShare(t, runs, 12*time.Hour, 16*24*time.Hour, opts, scenario) }
		if tc.shows {
			withAndWithout(t, tc.name, runs, share, &prefixOff)
			continue
		}
		held := share()
		prefixOff = true
		broken := share()
		prefixOff = false
		t.Logf("%s, %d runs: wrong thresholds %.3f (bound %.3f); without the prefix %.3f", tc.name, runs, held, simBound(runs), broken)
		if held > simBound(runs) {
			t.Errorf("%s: %.3f above %.3f", tc.name, held, simBound(runs))
		}
	}
}

// Questions of one entry labelled apart: an entry's agreeing questions
// are labelled within hours, its disagreeing ones one to four days later.
// Three questions per entry, each agreeing with probability 0.97 in an
// easy entry and 0.3 in a hard one (15% of entries): correlated within the
// entry, 0.87 in all. 60 entries a day, the disagreeing questions labelled
// two to six days later; daily looks, max_questions 3.
func TestPremiseQuestionsLabelledApart(t *testing.T) {
	simulationOnly(t)
	runs := simRuns(60, 600)
	scenario := func(r *rand.Rand) []timedEntry {
		out := make([]timedEntry, 600)
		for e := range out {
			arrive := simStart.Add(time.Duration(e) * 24 * time.Hour / 60)
			p := 0.97
			if r.Float64() < 0.15 {
				p = 0.3
			}
			qs := make([]timedQuestion, 3)
			for q := range qs {
				qs[q].confidence = r.Float64()
				if r.Float64() < p {
					qs[q].events = []labelEvent{{at: arrive.Add(hours(r, 0, 4)), agree: true}}
				} else {
					qs[q].events = []labelEvent{{at: arrive.Add(hours(r, 48, 144))}}
				}
			}
			out[e] = timedEntry{arrive: arrive, questions: qs}
		}
		return out
	}
	opts := timingOpts()
	opts.MaxQuestions = 3
	withAndWithout(t, "an entry's disagreeing questions labelled days after its agreeing ones, daily looks", runs, func() float64 {
		return lookShare(t, runs, 24*time.Hour, 17*24*time.Hour, opts, scenario)
	}, &prefixOff)
}

// sizedEntries is 1,000 entries, one in four of five questions agreeing
// with probability long, the others of one agreeing with probability
// short; an entry's questions share a confidence.
func sizedEntries(long, short float64) func(r *rand.Rand) [][]Line {
	return func(r *rand.Rand) [][]Line {
		out := make([][]Line, 1000)
		for e := range out {
			n, p := 1, short
			if r.IntN(4) == 0 {
				n, p = 5, long
			}
			c := r.Float64()
			for q := range n {
				out[e] = append(out[e], simLine(e, q, c, r.Float64() < p))
			}
		}
		return out
	}
}

// Entries with more questions are harder: one in four entries holds five
// questions agreeing 0.75, the others one agreeing 0.99. Per entry the
// agreement averages 0.93, above the target; per answer it is
// (0.75*5 + 0.99*3)/8 = 0.84, below it. One look after every 50 entries.
func TestPremiseLongEntriesHarder(t *testing.T) {
	simulationOnly(t)
	runs := simRuns(60, 1000)
	scenario := sizedEntries(0.75, 0.99)
	withAndWithout(t, "entries of five questions harder than entries of one", runs, func() float64 {
		return failureShare(t, runs, 200, MethodAnytime, scenario)
	}, &perEntryWeights)
}

// Entries with more questions are easier: one in four entries holds five
// questions agreeing 0.9, the others one agreeing 0.78: per answer
// (0.9*5 + 0.78*3)/8 = 0.855, below the target, and per entry lower still.
// Weighing per answer holds here too (weighing per entry was already
// conservative in this direction).
func TestPremiseLongEntriesEasier(t *testing.T) {
	simulationOnly(t)
	runs := simRuns(60, 1000)
	share := failureShare(t, runs, 200, MethodAnytime, sizedEntries(0.9, 0.78))
	t.Logf("entries of five questions easier than entries of one, %d runs: wrong thresholds %.3f (bound %.3f)", runs, share, simBound(runs))
	if share > simBound(runs) {
		t.Errorf("long entries easier: %.3f above %.3f", share, simBound(runs))
	}
}

// Passes: reviewers pass half of the hard entries (those they would
// label disagreeing) instead of labelling them. Agreement 0.86 over all
// entries; counting passes as disagreements holds, dropping the passed
// entries (the handling removed) does not: the rest agree 0.925.
func TestPremisePassedEntries(t *testing.T) {
	simulationOnly(t)
	runs := simRuns(60, 1000)
	dropPasses := false
	scenario := func(r *rand.Rand) [][]Line {
		var out [][]Line
		for e := range 1000 {
			agree := r.Float64() < 0.86
			l := simLine(e, 0, r.Float64(), agree)
			if !agree && r.IntN(2) == 0 {
				if dropPasses {
					continue
				}
				l.Pass, l.Agree = true, false
			}
			out = append(out, []Line{l})
		}
		return out
	}
	withAndWithout(t, "half the hard entries passed", runs, func() float64 {
		return failureShare(t, runs, 200, MethodAnytime, scenario)
	}, &dropPasses)
}
