package api_test

import (
	"context"
	"testing"
	"time"
)

// openPage opens url in a new tab of b, every command bounded by a
// minute.
func openPage(t *testing.T, b *browser, url string) *tab {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	tb := b.newTab(ctx)
	tb.navigate(url)
	return tb
}

// The Pass button: the reviewer passes an entry that cannot be judged; the
// API stores a pass for each of its questions (in /labels: "pass": true,
// agree null, the reviewer's name), and the page moves on to the next item.
func TestBrowserPassButton(t *testing.T) {
	b := startBrowser(t)
	s := newStack(t, stackOptions{})
	first, _ := s.evaluate(t, "one")
	second, _ := s.evaluate(t, "two")
	tb := openPage(t, b, s.url+"/review/")
	tb.waitFor(`document.body.dataset.status === 'ready' && document.getElementById('item').dataset.id === ` + jsString(first))
	tb.click("#reviewer")
	tb.typeText("cyd")
	tb.key("Escape")
	tb.click("#pass")
	tb.waitFor(`document.body.dataset.status === 'ready' && document.getElementById('item').dataset.id === ` + jsString(second) +
		` && document.getElementById('status').textContent.startsWith('Passed ' + ` + jsString(first) + `)`)
	lines := s.labelLines(t)
	for _, q := range []string{"n", "c", "s"} {
		l := lineOf(lines, first, q)
		if l == nil || l["pass"] != true || l["agree"] != nil || l["label"] != nil || l["reviewer"] != "cyd" {
			t.Errorf("/labels line of the passed entry's question %s: %v", q, l)
		}
	}
	for _, l := range lines {
		if l["entry"] == second {
			t.Errorf("the next entry got a line: %v", l)
		}
	}
	b.noProblems()
}

// The entry holding a group's evidence back (/progress waiting_on: an
// audited entry labelled in part) is served before the oldest unlabelled
// audited entry, which the queue alone would give; once it is labelled,
// the queue goes on.
func TestBrowserServesWaitingOnFirst(t *testing.T) {
	b := startBrowser(t)
	s := newStack(t, stackOptions{review: progressReview})
	held := s.addEntry(t, true, "request_id", "r-held", "questions",
		`[{"id":"q1","type":"noul","route":"auto","confidence":0.9,"answer":0.9},{"id":"q2","type":"noul","route":"auto","confidence":0.9,"answer":0.9}]`)
	if resp, body := s.call(t, "PUT", "/review/items/"+held+"/labels", `{"labels":{"q1":true},"reviewer":"ann"}`); resp.StatusCode != 204 {
		t.Fatalf("PUT: %d %s", resp.StatusCode, body)
	}
	untouched := s.addEntry(t, true, "request_id", "r-untouched")
	var queue struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	s.get(t, "/review/items?unlabeled=1&audit=1", &queue)
	if len(queue.Items) != 1 || queue.Items[0].ID != untouched {
		t.Fatalf("the queue of unlabelled audited entries %+v, want only %s: the test would not tell waiting_on first from the queue", queue, untouched)
	}

	tb := openPage(t, b, s.url+"/review/")
	tb.waitFor(`document.body.dataset.status === 'ready' && document.getElementById('item').dataset.id === ` + jsString(held))
	var row string
	tb.eval(`document.querySelector('#groups tbody tr .prefix').textContent`, &row)
	if row != "waiting on "+held {
		t.Errorf("the progress row says %q, want waiting on %s", row, held)
	}
	tb.click("#reviewer")
	tb.typeText("ann")
	tb.key("Escape")
	// q1 keeps its label; q2 gets one; Enter saves both.
	tb.click(`[data-question="q2"] button[data-label="true"]`)
	tb.key("Enter")
	tb.waitFor(`document.body.dataset.status === 'ready' && document.getElementById('item').dataset.id === ` + jsString(untouched))
	if l := lineOf(s.labelLines(t), held, "q2"); l == nil || l["label"] != true {
		t.Errorf("the held entry's second question: %v", l)
	}
	tb.waitFor(`!document.querySelector('#groups tbody tr .prefix').textContent.startsWith('waiting on ' + ` + jsString(held) + `)`)
	b.noProblems()
}
