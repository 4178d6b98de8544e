package replay

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/review/record"
)

// replay --escalate: the lines an `escalate <first> to <second>` block is
// calibrated from. The block asks the second version the questions the
// first routed human for their answers' confidence; replay asks the
// candidate second version (--model) exactly those of the labelled
// entries, and writes each one's line as an escalated question's second
// answer: stage 2, escalated_from the first version, its model,
// confidence, answer and agree the candidate's, route "replay".

// escalationCandidates keeps the lines of e that may be asked again: the
// first answers (stage 1) of version first that routed their question
// human. Which of them were human for low confidence the stored entry
// says (item.escalated). Its carried lines (questions not labelled yet,
// a passed entry) are kept by the same rule: they hold the escalation's
// complete prefix back, or count against it, as the first version's.
func escalationCandidates(e labelled, first string) labelled {
	candidate := func(l line) bool {
		return l.stage <= record.StageFirst && l.model == first && l.route == record.RouteHuman
	}
	e.lines = keepLines(e.lines, candidate)
	e.carried = keepLines(e.carried, candidate)
	return e
}

// firstStage keeps the lines of e that are first answers: a plain replay
// asks the new version as a first version, so the second answers of
// escalated questions (stage 2) are not its to rewrite.
func firstStage(e labelled) labelled {
	first := func(l line) bool { return l.stage <= record.StageFirst }
	e.lines = keepLines(e.lines, first)
	e.carried = keepLines(e.carried, first)
	return e
}

func keepLines(lines []line, keep func(line) bool) []line {
	kept := lines[:0:0]
	for _, l := range lines {
		if keep(l) {
			kept = append(kept, l)
		}
	}
	return kept
}

// escalated keeps the lines of e whose question the first version routed
// human for low confidence, as the stored entry records it: the question's
// reason, or, in an entry written before questions carried their reason,
// the entry's (low_confidence: no question of it was human for anything
// else).
func (it item) escalated(e labelled) labelled {
	reasons := make(map[string]string, len(it.questions))
	for _, q := range it.questions {
		if _, seen := reasons[q.ID]; !seen {
			reasons[q.ID] = q.Reason
		}
	}
	kept := e.lines[:0:0]
	for _, l := range e.lines {
		reason, ok := reasons[l.question]
		if ok && reason == "" {
			reason = it.reason
		}
		if reason == reasonLowConfidence {
			kept = append(kept, l)
		}
	}
	e.lines = kept
	return e
}

// reasonLowConfidence is the gateway's X-Route-Reason for an answer below
// its threshold: the reason the `escalate` block asks a question again
// that replay --escalate takes.
const reasonLowConfidence = "low_confidence"

// askAgain is the request of e's questions only, asking model, as the
// gateway's second call is made (evaluation.AskAgain).
func askAgain(request []byte, e labelled, model string) ([]byte, error) {
	ids := make([]string, len(e.lines))
	for i, l := range e.lines {
		ids[i] = l.question
	}
	body, err := evaluation.AskAgain(request, ids, model)
	if err != nil {
		return nil, fmt.Errorf("the stored request cannot be asked again (%v)", err)
	}
	return body, nil
}

// lineFields are fields every line written gets, beside the ones the
// answer (or its failure) sets: --escalate's stage and escalated_from.
type lineFields struct {
	names  []string
	values map[string]json.RawMessage
}

// escalationFields are the fields of a second answer's line, of first's
// escalated question; nil when first is "" (a plain replay).
func escalationFields(first string) *lineFields {
	if first == "" {
		return nil
	}
	from, _ := json.Marshal(first) // a string always marshals
	return &lineFields{
		names:  []string{"stage", "escalated_from"},
		values: map[string]json.RawMessage{"stage": json.RawMessage("2"), "escalated_from": from},
	}
}

// rewrite is rewriteLine with f's fields set too (into set, which it
// changes); a nil f sets none.
func (f *lineFields) rewrite(raw []byte, names []string, set map[string]json.RawMessage) ([]byte, error) {
	if f != nil {
		names = append(slices.Clone(names), f.names...)
		for k, v := range f.values {
			set[k] = v
		}
	}
	return rewriteLine(raw, names, set)
}
