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

// A plain replay asks the new version as a first version: the second
// answers of escalated questions (stage 2) are neither replayed nor
// carried, or calibrate would read them as an escalated group's.
// --escalate carries the first version's unlabelled questions routed
// human by the same rule as its labelled ones.
func TestStagesOfReplay(t *testing.T) {
	e := labelled{entry: "1-0",
		lines: []line{
			{question: "a", model: "v1", route: record.RouteHuman, stage: 1},
			{question: "a", model: "v2", route: record.RouteAuto, stage: 2},
			{question: "b", model: "v1", route: record.RouteAuto},
		},
		carried: []line{
			{question: "c", model: "v1", route: record.RouteHuman, stage: 1},
			{question: "c", model: "v2", route: record.RouteHuman, stage: 2},
			{question: "d", model: "v1", route: record.RouteAuto, stage: 1},
		},
	}
	names := func(ls []line) (out []string) {
		for _, l := range ls {
			out = append(out, l.question+"@"+l.model)
		}
		return out
	}
	plain := firstStage(e)
	if got := names(plain.lines); !slices.Equal(got, []string{"a@v1", "b@v1"}) {
		t.Errorf("plain replay's lines %v, want the first answers only", got)
	}
	if got := names(plain.carried); !slices.Equal(got, []string{"c@v1", "d@v1"}) {
		t.Errorf("plain replay's carried lines %v, want the first answers only", got)
	}
	esc := escalationCandidates(e, "v1")
	if got := names(esc.carried); !slices.Equal(got, []string{"c@v1"}) {
		t.Errorf("--escalate's carried lines %v, want the first version's routed human", got)
	}
}
