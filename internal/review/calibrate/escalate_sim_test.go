package calibrate

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/simulator"
)

// The escalation's guarantee and what it saves, simulated on the
// product's own calibration (escalate.go): the cascade of Trust or
// Escalate (Jung, Brahman and Choi, ICLR 2025), with delta split between
// its stages.
//
// Each run draws audited entries from a cascadePopulation, calibrates the first
// version (stage 1) and the second version's answers to the questions the
// first escalates (stage 2) together, as `calibrate` does, and measures on
// the whole cascadePopulation: the share of questions that still go to people,
// and whether the agreement of all the auto answers of the type together
// (the first version's at or above its threshold, and the second's at or
// above its threshold on the escalated ones) is below the target. The
// share of runs where it is must stay within delta plus three standard
// errors.

// simAnswer is one question's answer by one version: its confidence and
// whether it agrees with the truth.
type simAnswer struct {
	confidence float64
	agree      bool
}

// simPair is one cascadePopulation question: the first version's answer and the
// second's.
type simPair struct{ first, second simAnswer }

// simulatorPopulation is poolSize requests to the simulator, each with a
// noul question and a choice of four options, answered by both concrete
// versions against the simulator's truth: per type, the pairs (first,
// second) with service-1.0.0 first. The two versions follow their own
// curves (docs/simulator.md), the two types their own chance agreement:
// four agreement curves.
var simulatorPopulation = sync.OnceValues(func() (map[string]pool, error) {
	const poolSize = 6000
	unlimited := int64(0) // 0 turns the simulator's limits off
	sim, err := simulator.New(simulator.Handler{RequestsPerMinute: &unlimited, TokensPerSecond: &unlimited})
	if err != nil {
		return nil, err
	}
	pools := map[string]pool{}
	for i := range poolSize {
		body := func(version string) []byte {
			return []byte(`{"model":"` + version + `","state":"case ` + strconv.Itoa(i) + `: the parcel came late and the box was open","questions":{` +
				`"late":{"type":"noul","instructions":"Was it late?"},` +
				`"kind":{"type":"choice","instructions":"Which kind?","criteria":{"refund":null,"repair":null,"replace":null,"other":null}}}}`)
		}
		truth, err := simulator.Truth(body(simulator.DefaultVersion)) // the content's: the same for every version
		if err != nil {
			return nil, err
		}
		var answers [2]map[string]simAnswer
		for v, version := range []string{simulator.DefaultVersion, simulator.SecondVersion} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/v1/systemone", bytes.NewReader(body(version)))
			req.Header.Set("Authorization", "Bearer simulation")
			sim.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				return nil, fmt.Errorf("simulator %s: %d %s", version, rec.Code, rec.Body)
			}
			resp, err := evaluation.ParseResponse(rec.Body.Bytes())
			if err != nil {
				return nil, err
			}
			answers[v] = map[string]simAnswer{}
			for id, typ := range map[string]string{"late": evaluation.TypeNoul, "kind": evaluation.TypeChoice} {
				a, _ := resp.Find(id)
				r, ok := a.Read(typ)
				if !ok {
					return nil, fmt.Errorf("simulator %s: question %s unreadable", version, id)
				}
				agree := r.Choice == truth[id]
				if typ == evaluation.TypeNoul {
					agree = (r.Answer >= 0.5) == truth[id]
				}
				answers[v][typ] = simAnswer{r.Confidence, agree}
			}
		}
		for _, typ := range []string{evaluation.TypeNoul, evaluation.TypeChoice} {
			pools[typ] = append(pools[typ], simPair{answers[0][typ], answers[1][typ]})
		}
	}
	return pools, nil
})

// cascadePopulation is where a simulation's entries come from: it draws a
// question's pair of answers, and knows its routing under a cascade.
type cascadePopulation interface {
	draw(r *rand.Rand) simPair
	// outcome is the share of questions routed to people under c, and the
	// agreement of the auto answers (1 when there are none).
	outcome(c cascade) (human, agreement float64)
}

// pool is a cascadePopulation of recorded pairs, drawn uniformly.
type pool []simPair

func (p pool) draw(r *rand.Rand) simPair { return p[r.IntN(len(p))] }

func (p pool) outcome(c cascade) (human, agreement float64) {
	var people, auto, agree int
	for _, q := range p {
		switch {
		case c.has1 && q.first.confidence >= c.t1:
			auto++
			if q.first.agree {
				agree++
			}
		case c.has2 && q.second.confidence >= c.t2:
			auto++
			if q.second.agree {
				agree++
			}
		default:
			people++
		}
	}
	if auto == 0 {
		return float64(people) / float64(len(p)), 1
	}
	return float64(people) / float64(len(p)), float64(agree) / float64(auto)
}

// swapped is the pool with the versions the other way round.
func (p pool) swapped() pool {
	out := make(pool, len(p))
	for i, q := range p {
		out[i] = simPair{q.second, q.first}
	}
	return out
}

// curves is a cascadePopulation whose two versions' confidences are uniform on
// [lo, hi], independently, each agreeing at confidence c with the
// probability of its curve, independently given the confidences.
type curves struct {
	lo, hi        float64
	first, second func(c float64) float64
}

func (cv curves) draw(r *rand.Rand) simPair {
	a := cv.lo + (cv.hi-cv.lo)*r.Float64()
	b := cv.lo + (cv.hi-cv.lo)*r.Float64()
	return simPair{simAnswer{a, r.Float64() < cv.first(a)}, simAnswer{b, r.Float64() < cv.second(b)}}
}

// above is the share of confidences at or above t, and the mean of curve
// over them times that share (midpoint rule, 2,000 steps).
func (cv curves) above(t float64, has bool, curve func(float64) float64) (share, agreeing float64) {
	switch {
	case !has:
		return 0, 0
	case cv.lo == cv.hi: // one confidence
		if t > cv.lo {
			return 0, 0
		}
		return 1, curve(cv.lo)
	}
	from := min(max(t, cv.lo), cv.hi)
	const steps = 2000
	w := (cv.hi - from) / steps
	for i := range steps {
		agreeing += curve(from+(float64(i)+0.5)*w) * w
	}
	return (cv.hi - from) / (cv.hi - cv.lo), agreeing / (cv.hi - cv.lo)
}

func (cv curves) outcome(c cascade) (human, agreement float64) {
	s1, a1 := cv.above(c.t1, c.has1, cv.first)
	s2, a2 := cv.above(c.t2, c.has2, cv.second)
	auto := s1 + (1-s1)*s2
	if auto == 0 {
		return 1, 1
	}
	return 1 - auto, (a1 + (1-s1)*a2) / auto
}

// cascadeLines is the `/labels` lines of n entries drawn from pop: for
// each entry, its first answer's line (model first), and its second
// answer's (model second, escalated_from first). The second answer of
// every question is there: calibrate keeps those escalated under the
// first stage's threshold, as the live escalation (or `replay
// --escalate`) would have asked them.
func cascadeLines(r *rand.Rand, pop cascadePopulation, n int, typ, first, second string) []Line {
	lines := make([]Line, 0, 2*n)
	for e := range n {
		p := pop.draw(r)
		id := EntryID{Ms: simBase + uint64(e), Set: true}
		rid := "r" + strconv.Itoa(e)
		lines = append(lines,
			Line{Model: first, Type: typ, Question: "q", Confidence: p.first.confidence, HasConfidence: true,
				Agree: p.first.agree, Audit: true, Entry: id, RequestID: rid},
			Line{Model: second, EscalatedFrom: first, Type: typ, Question: "q", Confidence: p.second.confidence, HasConfidence: true,
				Agree: p.second.agree, Audit: true, Entry: id, RequestID: rid})
	}
	return lines
}

// cascade is what a calibration gives one type: the first stage's
// threshold and the second's as the fragment writes them (has* false for
// none).
type cascade struct {
	t1, t2     float64
	has1, has2 bool
}

// cascadeOf reads res's groups for the type: the first version's, and the
// second stage's.
func cascadeOf(res Result) cascade {
	var c cascade
	for _, g := range res.Groups {
		t, _ := strconv.ParseFloat(FormatThreshold(g.Threshold), 64)
		if g.EscalatedFrom == "" {
			c.t1, c.has1 = t, g.HasThreshold
		} else {
			c.t2, c.has2 = t, g.HasThreshold
		}
	}
	return c
}

// cascadeRuns calibrates runs samples of entries from pop, looking after
// each count of entries in looks, and returns the share of runs in which
// the union of auto answers fell below the target at some look, and the
// mean share of questions routed to people at the last look.
func cascadeRuns(t *testing.T, pop cascadePopulation, target, delta float64, runs int, looks []int) (failed, human float64) {
	t.Helper()
	fails := 0
	for run := range runs {
		lines := cascadeLines(rand.New(rand.NewPCG(uint64(run), 2025)), pop, looks[len(looks)-1], "noul", "first", "second")
		failedRun := false
		var last cascade
		for _, n := range looks {
			last = calibrateCascade(t, lines[:2*n], target, delta)
			if _, agreement := pop.outcome(last); agreement < target {
				failedRun = true
			}
		}
		if failedRun {
			fails++
		}
		h, _ := pop.outcome(last)
		human += h
	}
	return float64(fails) / float64(runs), human / float64(runs)
}

// aloneRuns is cascadeRuns' human share for the first version alone: the
// same samples' first answers, calibrated at the whole delta.
func aloneRuns(t *testing.T, pop cascadePopulation, target, delta float64, runs, entries int) (human float64) {
	t.Helper()
	for run := range runs {
		lines := cascadeLines(rand.New(rand.NewPCG(uint64(run), 2025)), pop, entries, "noul", "first", "second")
		lines = slices.DeleteFunc(lines, func(l Line) bool { return l.EscalatedFrom != "" })
		h, _ := pop.outcome(calibrateCascade(t, lines, target, delta))
		human += h
	}
	return human / float64(runs)
}

// calibrateCascade calibrates lines as the docs' command does (one
// question per entry) and reads the two stages' thresholds.
func calibrateCascade(t *testing.T, lines []Line, target, delta float64) cascade {
	t.Helper()
	res, err := Calibrate(lines, Options{Target: target, Delta: delta, By: ByType, MinLabels: 1, MaxQuestions: 1})
	if err != nil {
		t.Fatal(err)
	}
	return cascadeOf(res)
}

// escalationBound is the failure share a test accepts over runs: delta
// plus three standard errors of a share of delta.
func escalationBound(delta float64, runs int) float64 {
	return delta + 3*math.Sqrt(delta*(1-delta)/float64(runs))
}

// The union's guarantee where it is tightest. At the boundary both
// versions agree 0.899 against a target of 0.9 at every confidence, so
// every threshold either stage reports is wrong, and so is the union of
// any auto answers: the failure share is the share of runs that report
// any threshold. With one confidence the walk tests one candidate at its
// whole level, where its chance of a wrong threshold comes closest to its
// level; a delta of 0.3 makes that chance large enough for 600 runs to
// tell delta from twice delta. There a single look is every look: a
// rejection is never undone, and while the first stage reports nothing the
// second is calibrated under no threshold at every look. That case is run
// again with the split removed (noSplit: each stage at the whole delta,
// as Trust or Escalate calibrates each judge), and must then break the
// bound (0.44 of 600 runs against 0.356; 0.20 with the split). The rising
// curves are a case with thresholds to find: the first version agrees
// 0.7 + 0.3c at confidence c, the second 0.6 + 0.4c.
func TestEscalationGuarantee(t *testing.T) {
	simulationOnly(t)
	boundary := func(float64) float64 { return 0.899 }
	for _, tt := range []struct {
		name  string
		pop   curves
		delta float64
		runs  int
		looks []int
	}{
		{"boundary, one confidence, delta 0.3", curves{0.1, 0.1, boundary, boundary}, 0.3, simRuns(600, 2000), []int{1000}},
		{"boundary, delta 0.05", curves{0, 0.2, boundary, boundary}, 0.05, simRuns(150, 1000), []int{250, 500, 1000}},
		{"rising, delta 0.05", curves{0, 1, func(c float64) float64 { return 0.7 + 0.3*c }, func(c float64) float64 { return 0.6 + 0.4*c }},
			0.05, simRuns(40, 300), []int{500, 1000, 2000}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			failed, human := cascadeRuns(t, tt.pop, 0.9, tt.delta, tt.runs, tt.looks)
			bound := escalationBound(tt.delta, tt.runs)
			t.Logf("union below the target in %.3f of %d runs (bound %.3f); %.3f of questions to people", failed, tt.runs, bound, human)
			if failed > bound {
				t.Errorf("the union of auto answers fell below the target in %.3f of runs, above delta %v + 3 SE = %.3f", failed, tt.delta, bound)
			}
			docShows(t, fmt.Sprintf("%.3f of %d runs", failed, tt.runs), fmt.Sprintf("(bound %.3f)", bound))
			if tt.delta != 0.3 {
				return
			}
			noSplit = true
			broken, _ := cascadeRuns(t, tt.pop, 0.9, tt.delta, tt.runs, tt.looks)
			noSplit = false
			t.Logf("without the split: %.3f", broken)
			if broken <= bound {
				t.Errorf("without the split the union fell below the target in %.3f of runs, not above %.3f: the simulation does not show the split", broken, bound)
			}
			docShows(t, fmt.Sprintf("%.3f of %d runs: the test runs it both ways", broken, tt.runs))
		})
	}
}

// shareRow is one row of docs/escalation.md's table: the human share of
// a first version alone and with its escalate block.
type shareRow struct {
	first, second, typ string
	alone, escalated   float64
}

// escalationShares runs the simulator's two versions, both ways round,
// on its yes/no and four-option choice questions: 20 runs of 2,000
// audited entries each, looking at 1,000 and 2,000, target 0.9, delta
// 0.05. It fails the test when the union of auto answers falls below the
// target in more runs than delta + 3 SE, or, as docs/escalation.md says
// of these runs, in any.
func escalationShares(t *testing.T) []shareRow {
	t.Helper()
	pools, err := simulatorPopulation()
	if err != nil {
		t.Fatal(err)
	}
	const runs, target, delta = 20, 0.9, 0.05
	var rows []shareRow
	for _, typ := range []string{evaluation.TypeNoul, evaluation.TypeChoice} {
		for _, swap := range []bool{false, true} {
			row := shareRow{first: simulator.DefaultVersion, second: simulator.SecondVersion, typ: typ}
			pop := pools[typ]
			if swap {
				row.first, row.second, pop = row.second, row.first, pop.swapped()
			}
			var failed float64
			failed, row.escalated = cascadeRuns(t, pop, target, delta, runs, []int{1000, 2000})
			row.alone = aloneRuns(t, pop, target, delta, runs, 2000)
			if bound := escalationBound(delta, runs); failed > bound {
				t.Errorf("%s to %s, %s: the union fell below the target in %.3f of runs, above %.3f", row.first, row.second, typ, failed, bound)
			}
			if failed > 0 {
				t.Errorf("%s to %s, %s: the union fell below the target in %.3f of runs; docs/escalation.md says in none", row.first, row.second, typ, failed)
			}
			t.Logf("| %s | %s | %s | %.0f%% | %.0f%% | (union below target in %.3f of runs)", row.first, row.second, typ, 100*row.alone, 100*row.escalated, failed)
			rows = append(rows, row)
		}
	}
	return rows
}

// docShows checks that docs/escalation.md states each of the figures as
// the simulation measured them, in its words (the page's text broken over
// lines is read as one); the figures of the default run sizes only.
func docShows(t *testing.T, figures ...string) {
	t.Helper()
	if *simFull {
		return
	}
	doc, err := os.ReadFile(escalationDoc)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(doc)), " ")
	for _, f := range figures {
		if !strings.Contains(text, f) {
			t.Errorf("docs/escalation.md does not state %q, as the simulation measured it", f)
		}
	}
}
