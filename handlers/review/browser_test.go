package review_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// storedLabels reads the label records of an entry straight from Redis:
// question id -> label and reviewer.
func (s *stack) storedLabels(t *testing.T, entry string) map[string][2]any {
	t.Helper()
	recs, err := s.rdb.HGetAll(context.Background(), "systemone:review:{"+stream+"}:entry:"+entry).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]any{}
	for q, rec := range recs {
		var r struct {
			Label    any    `json:"label"`
			Reviewer string `json:"reviewer"`
		}
		if err := json.Unmarshal([]byte(rec), &r); err != nil {
			t.Fatal(err)
		}
		out[q] = [2]any{r.Label, r.Reviewer}
	}
	return out
}

// A reviewer labels an item with content by keys and a click; the labels
// reach Redis, the page moves on, the name is remembered, and the
// content, hostile markup included, is shown as text.
func TestBrowserLabelsWithContent(t *testing.T) {
	b := startBrowser(t)
	s := newStack(t, stackOptions{includeContent: true})
	hostile := `<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>`
	first, _ := s.evaluate(t, hostile)
	second, _ := s.evaluate(t, "second")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tb := b.newTab(ctx)
	tb.navigate(s.url + "/review/")
	tb.waitFor(`document.body.dataset.status === 'ready' && document.getElementById('item').dataset.id === ` + jsString(first))

	var shown struct {
		State  string
		Images int
		Pwned  any
	}
	tb.eval(`({State: document.querySelector('pre.state').textContent, Images: document.querySelectorAll('img, script:not([src])').length, Pwned: window.pwned ?? null})`, &shown)
	if shown.State != hostile || shown.Images != 0 || shown.Pwned != nil {
		t.Errorf("content not shown as text: %+v", shown)
	}
	var options []string
	tb.eval(`[...document.querySelectorAll('[data-question="c"] .controls button')].map(b => b.textContent)`, &options)
	if len(options) != 3 || options[2] != "3 maybe: unsure" {
		t.Errorf("choice options from the stored request: %q", options)
	}

	// The reviewer's name, typed into its field.
	tb.click("#reviewer")
	tb.typeText("ann")
	tb.key("Escape")
	// Questions in the request's order n, c, s: y for the yes/no question,
	// a click for the choice, 3 for the score tier, Enter to save.
	tb.key("y")
	tb.click(`[data-question="c"] button[data-label='"maybe"']`)
	tb.key("3")
	var pressed []string
	tb.eval(`[...document.querySelectorAll('button.chosen')].map(b => b.closest('[data-question]').dataset.question)`, &pressed)
	if len(pressed) != 3 {
		t.Errorf("chosen buttons for questions %v, want n, c and s", pressed)
	}
	tb.key("Enter")
	tb.waitFor(`document.body.dataset.status === 'ready' && document.getElementById('item').dataset.id === ` + jsString(second))

	want := map[string][2]any{"n": {true, "ann"}, "c": {"maybe", "ann"}, "s": {float64(3), "ann"}}
	if got := s.storedLabels(t, first); len(got) != 3 || got["n"] != want["n"] || got["c"] != want["c"] || got["s"] != want["s"] {
		t.Errorf("labels in Redis %v, want %v", got, want)
	}
	var reviewer string
	tb.eval(`localStorage.getItem('systemone-review.reviewer')`, &reviewer)
	if reviewer != "ann" {
		t.Errorf("reviewer in localStorage %q", reviewer)
	}
	// A reload keeps the name.
	tb.navigate(s.url + "/review/")
	tb.waitFor(`document.body.dataset.status === 'ready'`)
	tb.eval(`document.getElementById('reviewer').value`, &reviewer)
	if reviewer != "ann" {
		t.Errorf("reviewer after a reload %q", reviewer)
	}
	b.noProblems()
}

// Without stored content the page shows ids, types, confidences and the
// model's answers; 'a' takes the model's choice; a store failure shows as
// an error, not as a saved item; the end of the queue says so.
func TestBrowserLabelsWithoutContent(t *testing.T) {
	b := startBrowser(t)
	s := newStack(t, stackOptions{})
	first, _ := s.evaluate(t, "one")
	second, _ := s.evaluate(t, "two")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tb := b.newTab(ctx)
	tb.navigate(s.url + "/review/")
	tb.waitFor(`document.body.dataset.status === 'ready' && document.getElementById('item').dataset.id === ` + jsString(first))
	var view struct {
		Note    bool
		Answers []string
	}
	tb.eval(`({Note: !!document.querySelector('#content .note'), Answers: [...document.querySelectorAll('.question .answer')].map(p => p.textContent)})`, &view)
	if !view.Note || len(view.Answers) != 3 {
		t.Errorf("view without content: %+v", view)
	}

	// No reviewer name yet: saving asks for one.
	tb.key("n")
	tb.key("a")
	tb.key("1")
	tb.key("Enter")
	tb.waitFor(`!document.getElementById('error').hidden && document.getElementById('error').textContent.includes('reviewer')`)
	if got := s.storedLabels(t, first); len(got) != 0 {
		t.Fatalf("saved without a reviewer: %v", got)
	}
	tb.click("#reviewer")
	tb.typeText("bob")
	tb.key("Escape")
	tb.key("Enter")
	tb.waitFor(`document.body.dataset.status === 'ready' && document.getElementById('item').dataset.id === ` + jsString(second))
	var choice string
	got := s.storedLabels(t, first)
	var item struct {
		Questions []struct {
			ID     string `json:"id"`
			Answer any    `json:"answer"`
		} `json:"questions"`
	}
	s.get(t, "/review/items/"+first, &item)
	for _, q := range item.Questions {
		if q.ID == "c" {
			choice, _ = q.Answer.(string)
		}
	}
	if got["n"] != [2]any{false, "bob"} || got["c"] != [2]any{choice, "bob"} || got["s"] != [2]any{float64(1), "bob"} || choice == "" {
		t.Errorf("labels in Redis %v (model's choice %q)", got, choice)
	}

	// Redis gone: the save fails visibly and the item stays.
	s.redis.Stop()
	tb.key("y")
	tb.key("a")
	tb.key("2")
	tb.key("Enter")
	tb.waitFor(`document.getElementById('error').textContent.includes('store_unavailable') && document.getElementById('item').dataset.id === ` + jsString(second))

	// Back, with an empty store (no persistence): nothing left to review.
	s.redis.Restart()
	tb.key("r")
	tb.waitFor(`document.body.dataset.status === 'empty' && document.getElementById('error').hidden`)
	b.noProblems()
}
