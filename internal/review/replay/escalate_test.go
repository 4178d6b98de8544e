package replay

import (
	"slices"
	"testing"

	"github.com/systemone/systemone-gateway/internal/review/record"
)

// Which labelled questions --escalate asks again: the first version's
// stage 1 lines routed human, whose stored question says low confidence;
// in an entry stored before questions carried their reason, the entry's
// reason (low_confidence: every question it routed human was).
func TestEscalationChoice(t *testing.T) {
	e := labelled{entry: "1-0", lines: []line{
		{question: "sure", model: "v1", route: record.RouteAuto, stage: 1},
		{question: "low", model: "v1", route: record.RouteHuman, stage: 1},
		{question: "none", model: "v1", route: record.RouteHuman, stage: 1},
		{question: "low", model: "v2", route: record.RouteAuto, stage: 2}, // the block's own second answer
		{question: "old", model: "v1", route: record.RouteHuman},          // a line without stage: stage 1
		{question: "other", model: "v0", route: record.RouteHuman, stage: 1},
	}}
	questions := func(e labelled) []string {
		var out []string
		for _, l := range e.lines {
			out = append(out, l.question)
		}
		return out
	}
	candidates := escalationCandidates(e, "v1")
	if got := questions(candidates); !slices.Equal(got, []string{"low", "none", "old"}) {
		t.Fatalf("candidates %v, want the first version's stage 1 lines routed human", got)
	}
	if len(e.lines) != 6 {
		t.Fatal("choosing changed the entry's lines")
	}
	withReasons := item{reason: "no_threshold", questions: []record.Question{
		{ID: "sure", Reason: "confident"}, {ID: "low", Reason: "low_confidence"}, {ID: "none", Reason: "no_threshold"}, {ID: "old", Reason: "low_confidence"},
	}}
	if got := questions(withReasons.escalated(candidates)); !slices.Equal(got, []string{"low", "old"}) {
		t.Errorf("by the questions' reasons: %v, want low and old", got)
	}
	// Stored before questions carried reasons: the entry's reason decides.
	for reason, want := range map[string][]string{"low_confidence": {"low", "none", "old"}, "no_threshold": nil, "guarantee_alarm": nil} {
		old := item{reason: reason, questions: []record.Question{{ID: "sure"}, {ID: "low"}, {ID: "none"}, {ID: "old"}}}
		if got := questions(old.escalated(candidates)); !slices.Equal(got, want) {
			t.Errorf("an entry of reason %s without question reasons: %v, want %v", reason, got, want)
		}
	}
	// A question the stored entry does not hold is not asked.
	if got := questions((item{reason: "low_confidence"}).escalated(candidates)); got != nil {
		t.Errorf("questions not in the entry: %v", got)
	}
}

// --escalate names another version than --model.
func TestEscalateIsNotModel(t *testing.T) {
	o := Options{Review: "http://r", Upstream: "http://u", Model: "v2", APIKey: "k", Escalate: "v2"}
	if err := o.setDefaults(); err == nil {
		t.Error("--escalate equal to --model accepted")
	}
	o.Escalate = "v1"
	if err := o.setDefaults(); err != nil {
		t.Error(err)
	}
}
