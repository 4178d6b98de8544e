package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// The page behind Caddy's basic_auth, in a real browser, opened both with
// the credentials in its URL (http://user:pass@host/review/) and without
// (the browser sends the Authorization it holds): it serves the oldest
// unlabelled audited entry first, then the others, says which count for
// calibration, and shows each group's progress at the target the reviewer
// sets, as /progress computes it. Signed in, the reviewer is the signed-in
// user, on the page and in the API; the progress target starts at the
// monitor's; the page says what the guarantee says and assumes.
func TestBrowserBasicAuthAuditFirstAndProgress(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	b := startBrowser(t)
	for _, inURL := range []bool{true, false} {
		name := map[bool]string{true: "credentials in the URL", false: "credentials sent by the browser"}[inURL]
		t.Run(name, func(t *testing.T) {
			s := newStack(t, stackOptions{basicAuth: [2]string{"ann", string(hash)}, monitor: "0.88", review: progressReview})
			routine1 := s.addEntry(t, false, "request_id", "r-routine-1")
			audited1 := s.addEntry(t, true, "request_id", "r-audited-1")
			routine2 := s.addEntry(t, false)
			audited2 := s.addEntry(t, true, "request_id", "r-audited-2")

			// Without credentials, basic_auth answers, not the API.
			if resp, _ := s.call(t, http.MethodGet, "/review/items", ""); resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("no credentials: %d, want 401", resp.StatusCode)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			tb := b.newTab(ctx)
			pageURL := s.url + "/review/"
			if inURL {
				pageURL = strings.Replace(s.url, "http://", "http://ann:secret@", 1) + "/review/"
			} else {
				tb.do("Network.enable", nil)
				tb.do("Network.setExtraHTTPHeaders", map[string]any{"headers": map[string]string{
					"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("ann:secret")),
				}})
			}
			tb.navigate(pageURL)
			if inURL {
				// The case that broke: the document's base URL holds the
				// credentials, so any relative URL resolved against it
				// does too, and fetch refuses it.
				var baseURI string
				tb.eval(`document.baseURI`, &baseURI)
				if !strings.Contains(baseURI, "ann:secret@") {
					t.Fatalf("the browser dropped the credentials from the page's base URL (%s): the test would not exercise them", baseURI)
				}
			}
			itemIs := func(id, kind string) {
				t.Helper()
				tb.waitFor(`document.body.dataset.status === 'ready' && document.getElementById('item').dataset.id === ` + jsString(id) +
					` && document.getElementById('kind').dataset.kind === ` + jsString(kind))
			}
			itemIs(audited1, "audit")
			var note string
			tb.eval(`document.getElementById('kind').textContent`, &note)
			if !strings.Contains(note, "Counts for calibration") {
				t.Errorf("audited item's note %q", note)
			}
			// The monitor's target, not the page's own default.
			tb.waitFor(`document.getElementById('progress-status').dataset.target === '0.88'`)
			var reviewer, promise string
			tb.eval(`document.getElementById('reviewer').value`, &reviewer)
			tb.eval(`document.getElementById('promise').textContent`, &promise)
			if reviewer != "ann" {
				t.Errorf("reviewer field %q, want the signed-in ann", reviewer)
			}
			if !strings.Contains(promise, "What the guarantee says") || !strings.Contains(promise, "without regard to their content") {
				t.Errorf("the page's promise %q", promise)
			}
			label := func() {
				t.Helper()
				tb.key("n")
				tb.key("Enter")
			}
			label()
			itemIs(audited2, "audit")
			// The progress panel follows the labels: one audited label.
			tb.waitFor(`(() => { const r = document.querySelector('#groups tbody tr'); return r && r.dataset.type === 'noul' && r.children[4].textContent === '1'; })()`)
			label()
			itemIs(routine1, "routine")
			tb.eval(`document.getElementById('kind').textContent`, &note)
			if !strings.Contains(note, "does not count for calibration") {
				t.Errorf("routine item's note %q", note)
			}

			// The reviewer sets another target: the panel asks /progress at it.
			tb.eval(`document.getElementById('target').select()`, nil)
			tb.click("#target")
			tb.eval(`document.getElementById('target').select()`, nil)
			tb.typeText("0.9")
			tb.key("Escape")
			tb.waitFor(`document.getElementById('progress-status').dataset.target === '0.9' && document.querySelector('#groups tbody tr').children[4].textContent === '2'`)
			var rows [][]string
			tb.eval(`[...document.querySelectorAll('#groups tbody tr')].map(r => [...r.children].map(c => c.textContent))`, &rows)
			req, _ := http.NewRequest(http.MethodGet, s.url+"/review/progress?target=0.9", nil)
			req.SetBasicAuth("ann", "secret")
			resp, body := do(t, req)
			var progress struct {
				Groups []struct {
					Model     string   `json:"model"`
					Type      string   `json:"type"`
					Labels    int      `json:"labels"`
					Agree     int      `json:"agree"`
					N         int      `json:"n"`
					Threshold *float64 `json:"threshold"`
				} `json:"groups"`
			}
			if resp.StatusCode != 200 || json.Unmarshal(body, &progress) != nil || len(progress.Groups) != 1 {
				t.Fatalf("progress: %d %s", resp.StatusCode, body)
			}
			g := progress.Groups[0]
			// Two labels are far from the 29 that target 0.9 needs at
			// the top confidence: no candidate tested yet.
			if len(rows) != 1 || rows[0][0] != g.Model || rows[0][1] != g.Type || rows[0][4] != "2" || g.Labels != 2 ||
				!strings.HasPrefix(rows[0][5], "too few") || g.N != 0 || rows[0][6] != "none yet" || g.Threshold != nil {
				t.Errorf("panel %q, /progress %+v", rows, g)
			}

			label()
			itemIs(routine2, "routine")
			label()
			tb.waitFor(`document.body.dataset.status === 'empty' && document.getElementById('error').hidden`)
			// Routine labels do not count: the panel says how many were left out.
			tb.waitFor(`document.getElementById('progress-status').textContent.includes('2 label(s) of routine entries')`)
			if got := s.storedLabels(t, routine2); got["q"] != [2]any{false, "ann"} {
				t.Errorf("labels of the last item: %v", got)
			}
			// The API records the signed-in user, whatever name the body gives.
			other := s.addEntry(t, false)
			req, _ = http.NewRequest(http.MethodPut, s.url+"/review/items/"+other+"/labels", strings.NewReader(`{"labels":{"q":true},"reviewer":"mallory"}`))
			req.SetBasicAuth("ann", "secret")
			if resp, body := do(t, req); resp.StatusCode != http.StatusNoContent {
				t.Fatalf("PUT as ann: %d %s", resp.StatusCode, body)
			}
			if got := s.storedLabels(t, other); got["q"] != [2]any{true, "ann"} {
				t.Errorf("a label PUT by ann naming mallory: %v", got)
			}
		})
	}
	b.noProblems()
}
