package api_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"
)

// The page shows an escalated question's two answers, the first and the
// second version's, with their confidences, and which one the client got
// (the second when it routed the question auto, else the first); a
// question not escalated shows its one answer. Labels saved there export
// as both answers' lines.
func TestBrowserShowsEscalatedAnswers(t *testing.T) {
	b := startBrowser(t)
	s := newEscalationStack(t)
	resp := s.askIDs(t, "sure", "esc", "hard")
	id := lastEntry(t, s.rdb, resp.Header.Get("X-Request-Id"))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tb := b.newTab(ctx)
	tb.navigate(s.url + "/review/")
	tb.waitFor(`document.body.dataset.status === 'ready' && document.getElementById('item').dataset.id === ` + jsString(id))

	type shown struct {
		Answers []string // the text of each answer paragraph, in order
		Got     []string // the stages of the answers marked as the client's
	}
	var view map[string]shown
	tb.eval(`Object.fromEntries([...document.querySelectorAll('.question')].map(q => [q.dataset.question, {
		Answers: [...q.querySelectorAll('.answer:not(.escalation-note)')].map(p => p.textContent),
		Got: [...q.querySelectorAll('.answer.got')].map(p => p.dataset.stage),
	}]))`, &view)
	want := map[string]shown{
		"sure": {Answers: []string{"Model: 0.9375 (yes), confidence 0.88, routed auto"}},
		"esc": {Answers: []string{
			"First version service-1.0.0: 0.25 (no), confidence 0.50",
			"Second version service-2.0.0: 0.875 (yes), confidence 0.75, routed auto (the client got this answer)",
		}, Got: []string{"2"}},
		"hard": {Answers: []string{
			"First version service-1.0.0: 0.25 (no), confidence 0.50 (the client got this answer)",
			"Second version service-2.0.0: 0.625 (yes), confidence 0.25, routed human",
		}, Got: []string{"1"}},
	}
	for q, w := range want {
		if got := view[q]; !slices.Equal(got.Answers, w.Answers) || !slices.Equal(got.Got, w.Got) {
			t.Errorf("question %s shows %q, the client's %q; want %q, %q", q, got.Answers, got.Got, w.Answers, w.Got)
		}
	}
	var note string
	tb.eval(`document.querySelector('[data-question="esc"] .escalation-note').textContent`, &note)
	if want := "Asked again: the first version's answer routed it to a person (low_confidence), so service-2.0.0 was asked too; the question routed auto. Label the question itself: the label is checked against both answers."; note != want {
		t.Errorf("note %q, want %q", note, want)
	}

	// Yes to each, saved: both answers' lines carry the label.
	tb.click("#reviewer")
	tb.typeText("cy")
	tb.key("Escape")
	tb.key("y")
	tb.key("y")
	tb.key("y")
	tb.key("Enter")
	tb.waitFor(`document.body.dataset.status === 'empty' || document.getElementById('item').dataset.id !== ` + jsString(id))
	var got []string
	for _, l := range s.labels(t) {
		if l["entry"] == id && l["reviewer"] == "cy" {
			got = append(got, lineShape(l))
		}
	}
	if want := []string{
		"esc 1 service-1.0.0 0.5 0.25 true false human <nil>",
		"esc 2 service-2.0.0 0.75 0.875 true true auto service-1.0.0",
		"hard 1 service-1.0.0 0.5 0.25 true false human <nil>",
		"hard 2 service-2.0.0 0.25 0.625 true true human service-1.0.0",
		"sure 1 service-1.0.0 0.875 0.9375 true true auto <nil>",
	}; !slices.Equal(got, want) {
		t.Errorf("lines saved from the page %q, want %q", got, want)
	}
	if r, raw := do(t, mustRequest(t, http.MethodGet, s.url+"/review/items/"+id, "")); r.StatusCode != 200 {
		t.Errorf("item: %d %s", r.StatusCode, raw)
	}
	b.noProblems()
}
