package calibrate

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/review/certificate"
	"github.com/systemone/systemone-gateway/internal/review/record"
)

// escalationExample is the labels of docs/escalation.md's example: 600
// audited entries of one noul question each, answered by service-1.0.0,
// their confidences the steps of 1/600 in a shuffled order (as traffic
// comes). Its answers agree but for one in 25 from 0.3 up and one in two
// below. The pin in force escalated the questions it answered below 0.6 to
// service-2.0.0: those entries have a second line (stage 2), whose answers
// agree but for one in 30 from confidence 0.5 up and one in two below.
// Labelled on 10 January 2026 (ts).
func escalationExample() string {
	var b strings.Builder
	const n = 1500
	for i := range n {
		step := (i * 37) % n
		c := float64(n-step) / n
		agree := step%50 != 0
		if c < 0.5 {
			agree = step%3 != 0
		}
		common := fmt.Sprintf(`"entry":"1764000000000-%d","request_id":"r%d","org":"acme","type":"noul","question":"late","label":true,"audit":true,"reviewer":"ann","ts":"2026-01-10T10:00:00Z"`, i, i)
		fmt.Fprintf(&b, `{%s,"model":"service-1.0.0","confidence":%v,"answer":0.9,"agree":%v,"route":"human"}`+"\n", common, c, agree)
		if c >= 0.6 {
			continue
		}
		c2 := float64((i*53)%100) / 100
		agree2 := i%60 != 0
		if c2 < 0.4 {
			agree2 = i%2 == 0
		}
		fmt.Fprintf(&b, `{%s,"model":"service-2.0.0","confidence":%v,"answer":0.9,"agree":%v,"route":"auto","stage":2,"escalated_from":"service-1.0.0"}`+"\n", common, c2, agree2)
	}
	return b.String()
}

// exampleResult calibrates text under exampleOptions.
func exampleResult(t *testing.T, text string) Result {
	t.Helper()
	lines, err := ReadLines(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Calibrate(lines, exampleOptions())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// exampleOptions are the docs' command's: target 0.9, one question per
// entry, the other options their defaults, the look a day after the
// labels (the command looks now, later still: the same evidence).
func exampleOptions() Options {
	opts := DefaultOptions()
	opts.Target, opts.MaxQuestions = 0.9, 1
	opts.AsOf = time.Date(2026, 1, 11, 10, 0, 0, 0, time.UTC)
	return opts
}

// Second answers form their own group, (first -> second, type), never the
// second version's own; both stages are calibrated at delta/2; the second
// on exactly the questions escalated under the first stage's threshold.
func TestSecondStageGroups(t *testing.T) {
	res := exampleResult(t, escalationExample())
	if len(res.Groups) != 2 {
		t.Fatalf("groups: %+v", res.Groups)
	}
	first, second := res.Groups[0], res.Groups[1]
	if first.Model != "service-1.0.0" || first.EscalatedFrom != "" || first.Stage() != 1 || first.Delta != 0.025 || !first.HasThreshold {
		t.Errorf("first stage: %+v", first)
	}
	if second.Model != "service-2.0.0" || second.EscalatedFrom != "service-1.0.0" || second.Stage() != 2 || second.Delta != 0.025 || !second.HasThreshold {
		t.Errorf("second stage: %+v", second)
	}
	if !second.HasUnderThreshold || second.UnderThreshold != certificate.Written(first.Threshold) {
		t.Errorf("second stage under %v (%v), want the first's %v", second.UnderThreshold, second.HasUnderThreshold, first.Threshold)
	}
	// Its labels are the second answers whose first answer is below the
	// first threshold: counted here from the text.
	lines, _ := ReadLines(strings.NewReader(escalationExample()))
	firstConfidence := map[EntryID]float64{}
	below, above := 0, 0
	for _, l := range lines {
		if l.EscalatedFrom == "" {
			firstConfidence[l.Entry] = l.Confidence
		}
	}
	for _, l := range lines {
		switch {
		case l.EscalatedFrom == "":
		case firstConfidence[l.Entry] < second.UnderThreshold:
			below++
		default:
			above++
		}
	}
	if second.Labels != below || second.escalation.above != above || above == 0 {
		t.Errorf("second stage: %d labels, %d left out above; want %d and %d", second.Labels, second.escalation.above, below, above)
	}

	// Without the second answers, the first version alone at the whole
	// delta.
	var firstOnly []Line
	for _, l := range lines {
		if l.EscalatedFrom == "" {
			firstOnly = append(firstOnly, l)
		}
	}
	alone, err := Calibrate(firstOnly, exampleOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(alone.Groups) != 1 || alone.Groups[0].Delta != 0.05 {
		t.Errorf("first version alone: %+v", alone.Groups)
	}
}

// stagedLines is n entries of one noul question: the first version's
// answer at confidence first (agreeing), and the second version's at 0.9
// (agreeing), labelled at ts.
func stagedLines(n int, first float64, ts time.Time) []Line {
	var out []Line
	for e := range n {
		id := EntryID{Ms: simBase + uint64(e), Set: true}
		rid := fmt.Sprintf("r%d", e)
		out = append(out,
			Line{Model: "A", Type: "noul", Question: "q", Confidence: first, HasConfidence: true, Agree: true, Audit: true, Entry: id, RequestID: rid, Labelled: ts.UnixNano()},
			Line{Model: "B", EscalatedFrom: "A", Type: "noul", Question: "q", Confidence: 0.9, HasConfidence: true, Agree: true, Audit: true, Entry: id, RequestID: rid, Labelled: ts.UnixNano()})
	}
	return out
}

// The evidence rules hold for second answers as for first ones: a copy
// counts once (and a second answer is never a copy of the version's own
// line), a label inside the correction window or not given yet holds its
// entry, and every group's prefix, back; a second answer without its
// first answer is left out, and said so.
func TestSecondStageEvidenceRules(t *testing.T) {
	labelled := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	opts := Options{Target: 0.9, Delta: 0.05, By: ByType, MinLabels: 1, MaxQuestions: 1, CorrectWithin: time.Hour, AsOf: labelled.Add(24 * time.Hour)}
	calibrate := func(lines []Line) Result {
		t.Helper()
		res, err := Calibrate(lines, opts)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// The first version answers at 0.5, with no threshold: every question
	// escalated.
	base := stagedLines(300, 0.5, labelled)
	for i := range base {
		if base[i].EscalatedFrom == "" && i%6 == 0 {
			base[i].Agree = false
		}
	}
	want := calibrate(base)
	if len(want.Groups) != 2 || want.Groups[0].HasThreshold || !want.Groups[1].HasThreshold || want.Groups[1].HasUnderThreshold {
		t.Fatalf("groups: %+v", want.Groups)
	}

	copies := append(slices.Clone(base), base[1], base[3])                // two second answers exported twice
	own := Line{Model: "B", Type: "noul", Question: "q", Confidence: 0.9, // B's own answer, same request
		HasConfidence: true, Agree: true, Audit: true, Entry: EntryID{Ms: simBase + 1, Set: true}, RequestID: "r0", Labelled: labelled.UnixNano()}
	got := calibrate(append(copies, own))
	if got.Duplicates != 2 || len(got.Groups) != 3 || got.Groups[1].Model != "B" || got.Groups[1].EscalatedFrom != "" || got.Groups[1].Labels != 1 {
		t.Errorf("copies and B's own line: %d duplicates, groups %+v", got.Duplicates, got.Groups)
	}
	if g := got.Groups[2]; g.Labels != want.Groups[1].Labels || g.Threshold != want.Groups[1].Threshold {
		t.Errorf("second stage with copies: %+v, want %+v", g, want.Groups[1])
	}

	late := slices.Clone(base)
	late[201].Labelled = opts.AsOf.Add(-time.Minute).UnixNano() // entry 100's second answer, corrected a minute ago
	got = calibrate(late)
	for _, g := range got.Groups {
		if g.WaitingOn != fmt.Sprintf("%d-0", simBase+100) || g.CompleteThrough != fmt.Sprintf("%d-0", simBase+99) {
			t.Errorf("a second answer inside the window: %s %s waits on %q through %q", g.Model, g.EscalatedFrom, g.WaitingOn, g.CompleteThrough)
		}
	}
	pending := slices.Clone(base)
	pending[201].Pending, pending[201].Agree = true, false
	if got := calibrate(pending); got.Groups[1].WaitingOn != fmt.Sprintf("%d-0", simBase+100) {
		t.Errorf("a second answer not labelled yet: waits on %q", got.Groups[1].WaitingOn)
	}

	orphan := append(slices.Clone(base), Line{Model: "B", EscalatedFrom: "A", Type: "noul", Question: "other", Confidence: 0.9,
		HasConfidence: true, Agree: true, Audit: true, Entry: EntryID{Ms: simBase + 5, Set: true}, RequestID: "r5", Labelled: labelled.UnixNano()})
	got = calibrate(orphan)
	if g := got.Groups[1]; g.Labels != want.Groups[1].Labels || g.escalation.unjoined != 1 ||
		!slices.ContainsFunc(got.Notes, func(n string) bool {
			return strings.HasPrefix(n, `1 second answers of "B" to questions of "A" (noul) have no line of the first answer`)
		}) {
		t.Errorf("a second answer without its first: %+v, notes %q", g, got.Notes)
	}
}

// The fragment's escalate block: a line per second-stage group with a
// threshold, after the pins; a type without one left out (its escalated
// questions stay with people), no block when none has one, one block per
// first version.
func TestEscalateFragment(t *testing.T) {
	g := func(from, model, typ string, threshold float64) Group {
		return Group{Model: model, Type: typ, EscalatedFrom: from, Threshold: threshold, HasThreshold: threshold > 0, Labels: 10}
	}
	for _, tt := range []struct {
		name   string
		groups []Group
		want   string
	}{
		{"one type with a threshold", []Group{g("", "A", "noul", 0.8), g("", "A", "choice", 0.7), g("A", "B", "noul", 0.65), g("A", "B", "choice", 0)},
			"route {\n\tpin A {\n\t\tnoul 0.8\n\t\tchoice 0.7\n\t}\n\tescalate A to B {\n\t\tnoul 0.65\n\t}\n}\n"},
		{"none with a threshold", []Group{g("", "A", "noul", 0.8), g("A", "B", "noul", 0)},
			"route {\n\tpin A {\n\t\tnoul 0.8\n\t}\n}\n"},
		{"the first version without one", []Group{g("", "A", "noul", 0), g("A", "B", "noul", 0.9)},
			"route {\n\tpin A {\n\t\t# no threshold found: every question routes human (no_threshold)\n\t}\n\tescalate A to B {\n\t\tnoul 0.9\n\t}\n}\n"},
		{"two second versions", []Group{g("", "A", "noul", 0.8), g("A", "B", "noul", 0.9), g("A", "C", "noul", 0.7), g("A", "C", "choice", 0.7)},
			"route {\n\tpin A {\n\t\tnoul 0.8\n\t}\n\t# escalate \"A\" to \"B\" has thresholds too: the gateway takes one escalate block per version, so only \"C\"'s (more labels) is written\n\tescalate A to C {\n\t\tnoul 0.7\n\t\tchoice 0.7\n\t}\n}\n"},
	} {
		var b strings.Builder
		sortGroups(tt.groups)
		if err := WriteFragment(&b, Result{Groups: tt.groups}); err != nil {
			t.Fatal(err)
		}
		if b.String() != tt.want {
			t.Errorf("%s:\n%s\nwant\n%s", tt.name, b.String(), tt.want)
		}
	}
}

// EscalationExample is escalationExample, for the package's external
// tests.
var EscalationExample = escalationExample

// With --by question, a question id with a group of its own has its own
// group of second answers, calibrated under its own first-stage
// threshold; with --by org, second answers pool over organizations, each
// escalated under its organization's threshold.
func TestSecondStageGrouping(t *testing.T) {
	var lines []Line
	for e := range 800 {
		id := EntryID{Ms: simBase + uint64(e), Set: true}
		rid := fmt.Sprintf("r%d", e)
		q, org := "q1", "acme"
		if e%2 == 1 {
			q, org = "q2", "globex"
		}
		c, agree := 0.8, true
		if e%4 >= 2 {
			c, agree = 0.3, e%8 < 4 // half of the low answers wrong
		}
		lines = append(lines,
			Line{Model: "A", Type: "noul", Question: q, Org: org, Confidence: c, HasConfidence: true, Agree: agree, Audit: true, Entry: id, RequestID: rid},
			Line{Model: "B", EscalatedFrom: "A", Type: "noul", Question: q, Org: org, Confidence: 0.9, HasConfidence: true, Agree: true, Audit: true, Entry: id, RequestID: rid})
	}
	for _, by := range []string{ByQuestion, ByOrg} {
		res, err := Calibrate(lines, Options{Target: 0.9, Delta: 0.05, By: by, MinLabels: 100, MaxQuestions: 1})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, g := range res.Groups {
			threshold, under := "none", "none"
			if g.HasThreshold {
				threshold = FormatThreshold(g.Threshold)
			}
			if g.HasUnderThreshold {
				under = FormatThreshold(g.UnderThreshold)
			}
			names = append(names, fmt.Sprintf("%s<%s %s/%s %s under %s: %d", g.Model, g.EscalatedFrom, g.Question, g.Org, threshold, under, g.Labels))
		}
		want := map[string][]string{
			// q1 and q2 have groups of their own at both stages (the type
			// groups are empty); the second stage's hold the answers
			// escalated under each question's own threshold (0.31: the
			// grid's lowest value above the low answers, 0.3): the 200
			// low ones each, all agreeing at 0.9.
			ByQuestion: {"A< / none under none: 0", "A< q1/ 0.31 under none: 400", "A< q2/ 0.31 under none: 400",
				"B<A / none under none: 0", "B<A q1/ 0 under 0.31: 200", "B<A q2/ 0 under 0.31: 200"},
			// Each org has its own first-stage group, and the pooled one
			// is empty; the second stage is pooled, each answer escalated
			// under its org's 0.31, none under the pooled line.
			ByOrg: {"A< / none under none: 0", "A< /acme 0.31 under none: 400", "A< /globex 0.31 under none: 400",
				"B<A / 0 under none: 400"},
		}[by]
		if strings.Join(names, "\n") != strings.Join(want, "\n") {
			t.Errorf("--by %s groups:\n%s\nwant\n%s", by, strings.Join(names, "\n"), strings.Join(want, "\n"))
		}
	}
}

// With --family, the second stage's groups are members of the family,
// each at its own share in the order the groups form; the family's split
// holds the union of the two stages (any wrong threshold is a family
// error), so neither stage is halved again.
func TestSecondStageFamily(t *testing.T) {
	lines, err := ReadLines(strings.NewReader(escalationExample()))
	if err != nil {
		t.Fatal(err)
	}
	opts := exampleOptions()
	opts.Family = true
	res, err := Calibrate(lines, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Groups) != 2 || res.Groups[0].Delta != 0.05*familyShare(1) || res.Groups[1].Delta != 0.05*familyShare(2) {
		t.Errorf("family shares: %v and %v, want %v and %v", res.Groups[0].Delta, res.Groups[1].Delta, 0.05*familyShare(1), 0.05*familyShare(2))
	}
}

// A plan names no first version: a group of second answers never takes
// the second version's own group's plan.
func TestSecondStageHasNoPlan(t *testing.T) {
	plans := NewPlanSet([]record.Plan{{Model: "B", Type: "noul", Entries: 100, Created: "2026-01-01T00:00:00Z"}})
	if _, ok := plans.of(groupKey{model: "B", typ: "noul"}); !ok {
		t.Error("B's own group has no plan")
	}
	if p, ok := plans.of(groupKey{model: "B", typ: "noul", from: "A"}); ok {
		t.Errorf("the second answers of A's questions took B's plan %+v", p)
	}
}
