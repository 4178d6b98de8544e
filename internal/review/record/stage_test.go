package record

import (
	"encoding/json"
	"strings"
	"testing"
)

// An escalated question's lines: the first answer's (stage 1, routed
// human: it was asked again) and the second's beside it (stage 2, the
// second version's model, confidence, answer and route, escalated_from
// the first), each agreeing against the same label by its own answer.
// A question not escalated has its one line.
func TestEntryLines(t *testing.T) {
	low, high := 0.1, 0.9
	e := Entry{ID: "5-0", RequestID: "r", Org: "acme", Model: "v1", Audit: true, AuditP: "0.5", Questions: []Question{
		{ID: "plain", Type: "noul", Route: RouteAuto, Confidence: &high, Answer: json.RawMessage("0.95")},
		{ID: "esc", Type: "noul", Route: RouteAuto, Reason: "low_confidence", Confidence: &low, Answer: json.RawMessage("0.45"),
			Escalated: &Escalated{Model: "v2", Confidence: 0.8, Answer: json.RawMessage("0.9"), Route: RouteAuto}},
	}}
	with := Label{Label: json.RawMessage("true"), Reviewer: "ann", TS: "2026-01-01T00:00:00Z"}
	plain := e.Lines(&e.Questions[0], with)
	if len(plain) != 1 || plain[0].Stage != StageFirst || plain[0].Route != RouteAuto || !plain[0].Agree || plain[0].EscalatedFrom != "" {
		t.Fatalf("a question not escalated: %+v", plain)
	}
	lines := e.Lines(&e.Questions[1], with)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	first, second := lines[0], lines[1]
	if first.Model != "v1" || first.Stage != StageFirst || first.Route != RouteHuman || *first.Confidence != low || first.Agree || string(first.Answer) != "0.45" {
		t.Errorf("first line %+v: want v1's answer, routed human, disagreeing", first)
	}
	if second.Model != "v2" || second.Stage != StageSecond || second.EscalatedFrom != "v1" || second.Route != RouteAuto ||
		*second.Confidence != 0.8 || !second.Agree || string(second.Answer) != "0.9" {
		t.Errorf("second line %+v: want v2's answer, stage 2 from v1, routed auto, agreeing", second)
	}
	for _, l := range lines {
		if l.Entry != "5-0" || l.RequestID != "r" || l.Org != "acme" || l.Question != "esc" || l.Reviewer != "ann" || !l.Audit || l.AuditP != "0.5" || string(l.Label) != "true" {
			t.Errorf("line %+v: want the entry's and the label's fields", l)
		}
		b, err := l.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseLabel(b)
		if err != nil || back.Stage != l.Stage || back.EscalatedFrom != l.EscalatedFrom {
			t.Errorf("%s read back as stage %d from %q: %v", b, back.Stage, back.EscalatedFrom, err)
		}
	}
	// Pending: both lines, label and agree null.
	for _, l := range e.Lines(&e.Questions[1], Label{Pending: true}) {
		b, _ := l.Marshal()
		if !strings.Contains(string(b), `"agree":null`) || !strings.Contains(string(b), `"stage":`) {
			t.Errorf("pending line %s", b)
		}
	}
}

// stage is written on every line (1 when unset) and read back; a line
// without one reads as stage 1; a stage 2 line needs its first version,
// a stage 1 line must not name one, and no other stage reads.
func TestStageField(t *testing.T) {
	c := 0.5
	b, err := (&Label{Entry: "1-0", Model: "m", Type: "noul", Question: "q", Confidence: &c, Label: json.RawMessage("true"), Agree: true}).Marshal()
	if err != nil || !strings.Contains(string(b), `"stage":1`) || strings.Contains(string(b), "escalated_from") {
		t.Fatalf("%s %v: want stage 1 and no escalated_from", b, err)
	}
	const base = `{"model":"m","type":"noul","question":"q","confidence":0.5,"audit":true,"label":true,"agree":true`
	for _, tc := range []struct {
		line  string
		stage int
		from  string
		bad   string
	}{
		{base + `}`, 1, "", ""},
		{base + `,"stage":null}`, 1, "", ""},
		{base + `,"stage":1}`, 1, "", ""},
		{base + `,"stage":2,"escalated_from":"v1"}`, 2, "v1", ""},
		{base + `,"confidence":null,"stage":2,"escalated_from":"v1"}`, 2, "v1", ""},
		{base + `,"stage":2}`, 0, "", `"escalated_from" is missing`},
		{base + `,"stage":1,"escalated_from":"v1"}`, 0, "", "on a line of stage 1"},
		{base + `,"stage":3,"escalated_from":"v1"}`, 0, "", `"stage" is 3`},
		{base + `,"stage":0}`, 0, "", `"stage" is 0`},
		{base + `,"stage":"2","escalated_from":"v1"}`, 0, "", `"stage" is "2"`},
		{base + `,"stage":2,"escalated_from":7}`, 0, "", `"escalated_from" is 7`},
	} {
		l, err := ParseLabel([]byte(tc.line))
		switch {
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%s: error %v, want one saying %s", tc.line, err, tc.bad)
		case tc.bad == "" && (err != nil || l.Stage != tc.stage || l.EscalatedFrom != tc.from):
			t.Errorf("%s: stage %d from %q (%v), want %d %q", tc.line, l.Stage, l.EscalatedFrom, err, tc.stage, tc.from)
		}
	}
}
