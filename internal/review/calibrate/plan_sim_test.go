package calibrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/review/record"
)

// Cherry-picking a uniform certificate: someone runs `calibrate --method
// uniform --certificates` after every 40 entries and keeps the first
// certificate that comes, on traffic agreeing 0.895 against a target of
// 0.9 (so every threshold is wrong). Certificates only where the look was
// planned: without a plan each attempt is refused, and with one (500
// entries, fixed before labelling) the only certificate the looks can
// give is the planned look's, so the chance of a wrong certificate stays
// within delta. Without the refusal, the first certificate that comes is
// wrong far more often.
func TestPlanStopsCherryPicking(t *testing.T) {
	simulationOnly(t)
	runs := simRuns(200, 2000)
	bound := simBound(runs)
	const every, planned = 40, 500
	plans := NewPlanSet([]record.Plan{{Model: "m", Type: "noul", Entries: planned, Created: "2026-01-01T00:00:00Z"}})
	cherryPick := func(plans *PlanSet, runs int) (wrong float64, refused int) {
		failed := 0
		for run := range runs {
			r := rand.New(rand.NewPCG(uint64(run), 2029))
			entries := flatEntries(1000, 0.895)(r)
			var lines []Line
			for i, e := range entries {
				lines = append(lines, e...)
				if (i+1)%every != 0 {
					continue
				}
				opts := Options{Target: simTarget, Delta: simDelta, By: ByType, MinLabels: 1, Method: MethodUniform, MaxQuestions: 1, Plans: plans}
				res, err := Calibrate(lines, opts)
				if err != nil {
					t.Fatal(err)
				}
				var raw [][]byte
				if slices.ContainsFunc(res.Groups, func(g Group) bool { return g.HasThreshold }) {
					raw = rawLines(lines) // only a threshold is certified
				}
				certs, err := Certify(&res, opts, raw, time.Time{})
				if errors.Is(err, ErrUniformUnplanned) {
					refused++
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(certs) > 0 {
					if certs[0].Entries > planned && plans != nil {
						t.Fatalf("a planned look took %d entries, more than the plan's %d", certs[0].Entries, planned)
					}
					failed++
					break
				}
			}
		}
		return float64(failed) / float64(runs), refused
	}
	planned500, refusedPlanned := cherryPick(plans, runs)
	_, refusedUnplanned := cherryPick(nil, 10)
	allowUnplannedUniform = true
	unplanned, _ := cherryPick(nil, runs)
	allowUnplannedUniform = false
	t.Logf("uniform certificates kept at the first of looks every %d entries to 1,000, agreement 0.895 against 0.9, %d runs: wrong %.3f with a plan of %d entries (bound %.3f), %.3f without the refusal; refused without a plan: %d looks of 10 runs",
		every, runs, planned500, planned, bound, unplanned, refusedUnplanned)
	if refusedPlanned != 0 || refusedUnplanned == 0 {
		t.Errorf("refusals: %d with a plan, %d without: want none with, every threshold without", refusedPlanned, refusedUnplanned)
	}
	if planned500 > bound {
		t.Errorf("with a plan, cherry-picked certificates wrong in %.3f of runs, above %.3f", planned500, bound)
	}
	if unplanned <= bound {
		t.Errorf("without the refusal, cherry-picked certificates wrong in only %.3f of runs: the scenario does not show the refusal's point", unplanned)
	}
}

// rawLines writes lines as the /labels lines they stand for, in order:
// what a certificate's digest is computed over.
func rawLines(lines []Line) [][]byte {
	out := make([][]byte, len(lines))
	for i, l := range lines {
		out[i], _ = json.Marshal(map[string]any{
			"entry": fmt.Sprintf("%d-%d", l.Entry.Ms, l.Entry.Seq), "request_id": l.RequestID, "model": l.Model, "type": l.Type,
			"question": l.Question, "confidence": l.Confidence, "label": l.Agree, "agree": l.Agree, "audit": l.Audit,
		})
	}
	return out
}
