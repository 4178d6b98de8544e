package calibrate

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// --family, simulated: thirteen organizations, each with a group of its
// own (--by org), every one agreeing 0.895 against a target of 0.9 at
// every confidence, so that any threshold reported is wrong; calibrate
// run again after every entry. Each group's own chance stays
// within delta; the chance that any of the thirteen is wrong does not.
// With --family it does.

const familyOrgs = 13

// familyLines is n entries of each of the orgs, interleaved, one question
// each, confidence uniform in [0, 0.3] (few candidates: a quick walk),
// agreeing with probability p.
func familyLines(r *rand.Rand, n int, p float64) [][]Line {
	out := make([][]Line, 0, n*familyOrgs)
	for e := range n * familyOrgs {
		l := simLine(e, 0, 0.3*r.Float64(), r.Float64() < p)
		l.Org = fmt.Sprintf("org%02d", e%familyOrgs)
		out = append(out, []Line{l})
	}
	return out
}

// familyFailure runs the scenario and returns the share of runs in which
// any group reported a threshold at any look, and the mean over groups of
// the share in which that group did. Each group's delta is calibrate's
// own (Group.Delta, its share under --family); its walk is the anytime
// method's walker, looked at after every entry of the group (looks cost
// the method nothing, so the most looks are the hardest case):
// TestPowerSmoke holds the walker to calibrate's own reports.
func familyFailure(t *testing.T, runs, perOrg int, family bool) (anyWrong, perGroup float64) {
	t.Helper()
	opts := Options{Target: simTarget, Delta: simDelta, By: ByOrg, MinLabels: 30, Method: MethodAnytime, MaxQuestions: 1, Family: family}
	groupsWrong, runsWrong := 0, 0
	var deltas map[string]float64
	for run := range runs {
		r := rand.New(rand.NewPCG(uint64(run), 2031))
		entries := familyLines(r, perOrg, 0.895)
		if run == 0 {
			// The groups form where the stream puts them, the same in
			// every run: their deltas are calibrate's in the first. A
			// group's share is fixed before its labels: the same at an
			// early look as at the last.
			deltas = familyGroupDeltas(t, entries, opts)
			if early := familyGroupDeltas(t, entries[:familyOrgs*40], opts); !maps.Equal(early, deltas) {
				t.Fatalf("the groups' deltas moved between looks: %v, then %v", early, deltas)
			}
		}
		walkers := map[string]*walker{}
		for org, d := range deltas {
			walkers[org] = newWalker(simTarget, d, false, 1)
		}
		wrong := 0
		for _, e := range entries {
			w := walkers[e[0].Org]
			if w == nil || w.hasThreshold() {
				continue
			}
			w.observe([]obsLine{{e[0].Confidence, e[0].Agree}}, Draw{}, false)
			if w.hasThreshold() {
				wrong++
			}
		}
		groupsWrong += wrong
		if wrong > 0 {
			runsWrong++
		}
	}
	return float64(runsWrong) / float64(runs), float64(groupsWrong) / float64(runs*familyOrgs)
}

// familyGroupDeltas calibrates the entries with opts and returns each org
// group's delta.
func familyGroupDeltas(t *testing.T, entries [][]Line, opts Options) map[string]float64 {
	t.Helper()
	s := NewSample()
	for _, e := range entries {
		for _, l := range e {
			s.Add(l)
		}
	}
	res, err := s.Calibrate(opts)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, g := range res.Groups {
		if g.Org != "" {
			out[g.Org] = g.Delta
		}
	}
	if len(out) != familyOrgs {
		t.Fatalf("%d org groups, want %d", len(out), familyOrgs)
	}
	return out
}

func TestFamilyHoldsTogether(t *testing.T) {
	simulationOnly(t)
	runs := simRuns(200, 2000)
	bound := simBound(runs)
	anyFamily, perFamily := familyFailure(t, runs, 1000, true)
	anyAlone, perAlone := familyFailure(t, runs, 1000, false)
	t.Logf("13 orgs at agreement 0.895 against 0.9, calibrate after every entry to 1,000 each, %d runs: some group wrong in %.3f of runs with --family (bound %.3f), %.3f without; each group %.4f and %.4f",
		runs, anyFamily, bound, anyAlone, perFamily, perAlone)
	if anyFamily > bound {
		t.Errorf("--family: some group wrong in %.3f of runs, above %.3f", anyFamily, bound)
	}
	if anyAlone <= bound {
		t.Errorf("without --family some group is wrong in only %.3f of runs: the scenario does not show what --family is for", anyAlone)
	}
	if perAlone > bound {
		t.Errorf("without --family a group is wrong in %.3f of runs on its own, above %.3f", perAlone, bound)
	}
}

// What --family costs: with thirteen organizations of equal traffic on
// the flat curve (agreement 0.97 at every confidence, uniform on the
// service's grid), target 0.9, the entries of its own an organization's
// group takes to a first threshold, at its place in the family, against
// the same group without --family. docs/calibration.md gives the figures
// (-sim.full: 400 runs).
func TestFamilyCost(t *testing.T) {
	simulationOnly(t)
	runs := simRuns(60, 400)
	g := flatCurve.grid()
	opts := Options{Target: simTarget, Delta: simDelta, By: ByOrg, MinLabels: 30, Method: MethodAnytime, MaxQuestions: 1}
	// Every org's entries drawn alike: the shares come from where the
	// groups form, which the interleaving fixes.
	r := rand.New(rand.NewPCG(7, 7))
	opts.Family = true
	family := familyGroupDeltas(t, familyLines(r, 40, 0.97), opts)
	firstThreshold := func(delta float64, seed uint64) []int {
		var out []int
		for run := range runs {
			r := rand.New(rand.NewPCG(seed, uint64(run)))
			w := newWalker(simTarget, delta, false, 1)
			n := 0
			var buf []obsLine
			for !w.hasThreshold() && n < powerHorizon {
				buf = g.entryLines(r, 1, buf)
				w.observe(buf, Draw{}, false)
				n++
			}
			out = append(out, n)
		}
		slices.Sort(out)
		return out
	}
	alone := firstThreshold(simDelta, 1)
	t.Logf("without --family: median %d entries of the org's own to a first threshold (80th pct %d)", alone[len(alone)/2], alone[len(alone)*4/5])
	for _, org := range []string{"org00", "org06", "org12"} {
		with := firstThreshold(family[org], 1)
		rank := 0
		fmt.Sscanf(org, "org%d", &rank)
		ratio := float64(with[len(with)/2]) / float64(alone[len(alone)/2])
		t.Logf("--family, %s (group %d of 14, delta %.5f = delta/%.0f): median %d (80th pct %d), %.2f times without", org, rank+2, family[org], simDelta/family[org], with[len(with)/2], with[len(with)*4/5], ratio)
		if ratio < 1 || ratio > 3 {
			t.Errorf("%s: --family costs %.2f times the entries, want between 1 and 3", org, ratio)
		}
	}
}
