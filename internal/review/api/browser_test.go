package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
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

// labelOrg writes n audited entries of org, one yes/no question each at
// confidence 0.9, and labels them: agree of them agree with the model.
func (s *stack) labelOrg(t *testing.T, org string, n, agree int) {
	t.Helper()
	for i := range n {
		label := "true"
		if i >= agree {
			label = "false"
		}
		id := s.addEntry(t, true, "request_id", fmt.Sprintf("r-%s-%d", org, i), "org", org,
			"questions", `[{"id":"q","type":"noul","route":"auto","confidence":0.9,"answer":0.8}]`)
		if resp, body := s.call(t, http.MethodPut, "/review/items/"+id+"/labels", `{"labels":{"q":`+label+`},"reviewer":"ann"}`); resp.StatusCode != 204 {
			t.Fatalf("PUT: %d %s", resp.StatusCode, body)
		}
	}
}

// The progress panel per organization: the reviewer picks the grouping,
// the panel asks /progress?by=org and shows each group's organization
// (the pool of the others as such), its labels, labels_needed and
// labels_expected as /progress gives them; the choice is remembered.
func TestBrowserProgressByOrg(t *testing.T) {
	b := startBrowser(t)
	s := newStack(t, stackOptions{review: progressReview})
	s.labelOrg(t, "acme", 45, 45) // an org of its own, with a threshold at 0.9
	s.labelOrg(t, "beta", 25, 24) // too few for a group: pooled, no threshold yet
	s.labelOrg(t, "gamma", 3, 3)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tb := b.newTab(ctx)
	tb.navigate(s.url + "/review/")
	tb.eval(`localStorage.setItem('systemone-review.target', '0.9')`, nil)
	tb.navigate(s.url + "/review/")
	// By model and type (the default): one group, no organization.
	tb.waitFor(`document.getElementById('progress-status').dataset.by === 'type' && document.querySelectorAll('#groups tbody tr').length === 1`)
	var note bool
	tb.eval(`document.getElementById('by-note').hidden`, &note)
	if !note {
		t.Error("the per-organization note shows while grouping by type")
	}

	// The reviewer picks per organization.
	tb.click("#by")
	tb.eval(`(() => { const s = document.getElementById('by'); s.value = 'org'; s.dispatchEvent(new Event('change')); })()`, nil)
	tb.waitFor(`document.getElementById('progress-status').dataset.by === 'org' && document.getElementById('progress-status').dataset.target === '0.9'`)

	type row struct{ Org, Shown, Labels, Needed, Expected string }
	readRows := func() []row {
		var rows []row
		tb.eval(`[...document.querySelectorAll('#groups tbody tr')].map(r => ({Org: r.dataset.org, Shown: r.querySelector('.org').textContent,
			Labels: r.children[4].textContent, Needed: r.querySelector('.needed').textContent, Expected: r.querySelector('.expected').textContent}))`, &rows)
		return rows
	}
	rows := readRows()
	resp, body := s.call(t, http.MethodGet, "/review/progress?target=0.9&by=org", "")
	var progress struct {
		Groups []struct {
			Org            string   `json:"org"`
			Labels         int      `json:"labels"`
			Threshold      *float64 `json:"threshold"`
			LabelsNeeded   int      `json:"labels_needed"`
			LabelsExpected *int     `json:"labels_expected"`
		} `json:"groups"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &progress) != nil {
		t.Fatalf("progress: %d %s", resp.StatusCode, body)
	}
	// The labels exercise both kinds of group: acme's own, with its
	// threshold, and the pool, still needing labels, more expected than
	// the floor (one of its labels disagrees).
	if len(progress.Groups) != 2 || progress.Groups[0].Org == progress.Groups[1].Org {
		t.Fatalf("/progress?by=org: %s", body)
	}
	pooledNeeds := false
	for _, g := range progress.Groups {
		if g.Org == "" && g.Threshold == nil && g.LabelsNeeded > 0 && g.LabelsExpected != nil && *g.LabelsExpected > g.LabelsNeeded {
			pooledNeeds = true
		}
	}
	if !pooledNeeds {
		t.Fatalf("the pooled group does not need labels with an estimate; the test's labels do not exercise the panel:\n%s", body)
	}
	if len(rows) != len(progress.Groups) {
		t.Fatalf("panel rows %+v, /progress %s", rows, body)
	}
	for i, g := range progress.Groups {
		shown, expected := g.Org, "–"
		if g.Org == "" {
			shown = "others, pooled"
		}
		if g.LabelsExpected != nil {
			expected = fmt.Sprint(*g.LabelsExpected)
		}
		want := row{Org: g.Org, Shown: shown, Labels: fmt.Sprint(g.Labels), Needed: fmt.Sprint(g.LabelsNeeded), Expected: expected}
		if rows[i] != want {
			t.Errorf("panel row %d %+v, want %+v from /progress", i, rows[i], want)
		}
	}
	tb.eval(`document.getElementById('by-note').hidden`, &note)
	if note {
		t.Error("no per-organization note while grouping by organization")
	}
	var promise string
	tb.eval(`document.getElementById('by-note').textContent`, &promise)
	if !strings.Contains(promise, "Each group's promise is its own") || !strings.Contains(promise, "calibrate --family") {
		t.Errorf("the per-organization note does not say the promise is per group: %q", promise)
	}

	// A reload keeps the grouping.
	tb.navigate(s.url + "/review/")
	tb.waitFor(`document.getElementById('progress-status').dataset.by === 'org' && document.querySelectorAll('#groups tbody tr').length === 2`)
	if again := readRows(); len(again) != len(rows) || again[0] != rows[0] || again[1] != rows[1] {
		t.Errorf("after a reload %+v, before %+v", again, rows)
	}
	b.noProblems()
}

// The page names the audit an entry was drawn by: a uniform audit (audit_p
// alone, `audit 1` included) as the uniform sample, the active audit
// (audit_p with its floor and from) as active, with its probability.
func TestBrowserNamesTheAudit(t *testing.T) {
	b := startBrowser(t)
	s := newStack(t, stackOptions{})
	uniform := s.addEntry(t, true, "audit_p", "1")
	active := s.addEntry(t, true, "audit_p", "0.4", "audit_floor", "0.25", "audit_from", "0.5")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tb := b.newTab(ctx)
	tb.navigate(s.url + "/review/")
	for i, tc := range []struct{ id, has, lacks string }{
		{uniform, "a uniform sample of all answers", "active"},
		{active, "drawn by the active audit, with probability 0.4", "uniform"},
	} {
		tb.waitFor(`document.body.dataset.status === 'ready' && document.getElementById('item').dataset.id === ` + jsString(tc.id))
		if i == 0 {
			tb.click("#reviewer")
			tb.typeText("ann")
			tb.key("Escape")
		}
		var note string
		tb.eval(`document.getElementById('kind').textContent`, &note)
		if !strings.Contains(note, tc.has) || strings.Contains(note, tc.lacks) {
			t.Errorf("entry %s: note %q, want %q and not %q", tc.id, note, tc.has, tc.lacks)
		}
		tb.key("n")
		tb.key("Enter")
	}
}
