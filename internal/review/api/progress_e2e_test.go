package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/systemone/systemone-gateway/internal/review/calibrate" // also registers the calibrate command
)

// calibrateJSON runs `systemone-gateway calibrate ... --json <labels URL>`
// as Caddy's CLI sets it up, and returns what it prints.
func calibrateJSON(t testing.TB, args ...string) string {
	t.Helper()
	c, ok := caddycmd.Commands()["calibrate"]
	if !ok {
		t.Fatal("no calibrate command")
	}
	cmd := &cobra.Command{Use: c.Name, SilenceUsage: true, SilenceErrors: true}
	c.CobraFunc(cmd)
	var out, errb bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("calibrate %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

// labelAudited writes n entries with one question each and labels them:
// agree of them agree with the model.
func (s *stack) labelAudited(t *testing.T, question, typ string, n, agree int, confidence float64, audit bool) {
	t.Helper()
	for i := range n {
		answer, label := "0.8", "true"
		if typ == "score" {
			answer, label = "2", "2"
		}
		if i >= agree {
			label = map[string]string{"noul": "false", "score": "0"}[typ]
		}
		id := s.addEntry(t, audit, "request_id", fmt.Sprintf("r-%s-%d", question, i), "questions", fmt.Sprintf(`[{"id":%q,"type":%q,"route":"auto","confidence":%v,"answer":%s}]`, question, typ, confidence, answer))
		if resp, body := s.call(t, http.MethodPut, "/review/items/"+id+"/labels", fmt.Sprintf(`{"labels":{%q:%s},"reviewer":"ann"}`, question, label)); resp.StatusCode != 204 {
			t.Fatalf("PUT: %d %s", resp.StatusCode, body)
		}
	}
}

// progressReview sets the review handler as progressArgs set calibrate:
// labels final at once, one question of a group per entry.
const (
	progressReview = "correct_within 0s\n\t\t\tmax_questions 1"
	progressArgs   = " --correct-within 0s --max-questions 1"
)

// fromFile is a /progress answer as calibrate prints it from a file, which
// cannot count late corrections: late_corrections null.
func fromFile(body []byte) []byte {
	return regexp.MustCompile(`"late_corrections": [0-9]+`).ReplaceAll(body, []byte(`"late_corrections": null`))
}

// GET /progress answers exactly what `calibrate --json` prints for the
// labels stored now, with the command's defaults; bad or missing options
// are a 422 list.
func TestReviewProgress(t *testing.T) {
	s := newStack(t, stackOptions{review: progressReview})
	labels := s.url + "/review/labels"

	// Nothing labelled yet: the command refuses to calibrate nothing (and
	// exits non-zero), while the page still needs an answer: the document
	// the command's library writes for no lines, with no groups.
	resp, body := s.call(t, http.MethodGet, "/review/progress?target=0.9", "")
	opts := calibrate.DefaultOptions()
	opts.Target, opts.CorrectWithin, opts.MaxQuestions = 0.9, 0, 1
	empty, err := calibrate.Calibrate(nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := calibrate.WriteJSON(&want, empty); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || string(body) != want.String() || !strings.Contains(want.String(), `"groups": []`) {
		t.Errorf("no labels: %d %q, want %q", resp.StatusCode, body, want.String())
	}

	s.labelAudited(t, "q1", "noul", 45, 45, 0.9, true) // enough to pass 0.9
	s.labelAudited(t, "q2", "score", 5, 3, 0.7, true)  // too few
	s.labelAudited(t, "q3", "noul", 3, 3, 0.95, false) // not audited: ignored
	for _, tc := range []struct{ query, args string }{
		{"target=0.9", "--target 0.9"},
		{"target=0.9&delta=0.1", "--target 0.9 --delta 0.1"},
		{"target=0.8&by=question&min_labels=30", "--target 0.8 --by question --min-labels 30"},
		{"target=0.8&by=org&min_labels=5", "--target 0.8 --by org --min-labels 5"},
		{"target=0.8&by=org&min_labels=5&family=1", "--target 0.8 --by org --min-labels 5 --family"},
		{"target=0.99&delta=0.2&by=type&min_labels=99999999999999999999", "--target 0.99 --delta 0.2"},
		{"target=0.9&delta=1e-300", "--target 0.9 --delta 1e-300"},
		{"target=0.9&method=uniform", "--target 0.9 --method uniform"},
		{"target=0.9&method=anytime", "--target 0.9"},
	} {
		want := calibrateJSON(t, append(strings.Fields(tc.args+progressArgs), "--json", labels)...)
		resp, body := s.call(t, http.MethodGet, "/review/progress?"+tc.query, "")
		body = fromFile(body)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: %d %v", tc.query, resp.StatusCode, resp.Header)
		}
		if string(body) != want {
			t.Errorf("%s:\n%s\nwant what calibrate %s --json prints:\n%s", tc.query, body, tc.args, want)
		}
		if tc.query == "target=0.9" && (!regexp.MustCompile(`"threshold": [0-9]`).MatchString(want) || !regexp.MustCompile(`"labels_expected": [0-9]`).MatchString(want)) {
			t.Errorf("the noul group has no threshold, or no group labels_expected: the test's labels do not exercise them:\n%s", want)
		}
	}

	for query, want := range map[string]string{
		"":                          "missing",
		"delta=0.1":                 "missing",
		"target=x":                  "float_parsing",
		"target=NaN":                "float_parsing",
		"target=0":                  "greater_than",
		"target=1":                  "less_than",
		"target=0.9&delta=1.5":      "less_than",
		"target=0.9&delta=1":        "less_than",
		"target=0.9&delta=0":        "greater_than",
		"target=1e-400":             "greater_than",
		"target=0.9&by=model":       "literal_error",
		"target=0.9&min_labels=0":   "greater_than_equal",
		"target=0.9&min_labels=1.5": "int_parsing",
		"target=0.9&method=cp":      "literal_error",
		"target=0.9&family=maybe":   "bool_parsing",
	} {
		resp, body := s.call(t, http.MethodGet, "/review/progress?"+query, "")
		if types, locs := detailTypes(t, resp, body); len(types) != 1 || types[0] != want || locs[0][0] != "query" {
			t.Errorf("%q: %v %v, want %s", query, types, locs, want)
		}
	}
	resp, body = s.call(t, http.MethodPost, "/review/progress?target=0.9", "")
	wantDetail(t, resp, body, 405, "method_not_allowed")
}

// Labels of the active audit: the command's default method refuses them,
// so /progress without method answers what `calibrate --method weighted
// --json` prints, and with method=uniform the refusal, as a 422 saying why.
func TestReviewProgressActiveAudit(t *testing.T) {
	s := newStack(t, stackOptions{review: progressReview})
	labels := s.url + "/review/labels"
	for i := range 40 {
		confidence := 0.95
		p := "0.5"
		if i%4 == 0 {
			confidence, p = 0.3, "0.05"
		}
		id := s.addEntry(t, true, "audit_p", p, "audit_floor", "0.05", "audit_from", "0.5",
			"questions", fmt.Sprintf(`[{"id":"q","type":"noul","route":"auto","confidence":%v,"answer":0.9}]`, confidence))
		if resp, body := s.call(t, http.MethodPut, "/review/items/"+id+"/labels", `{"labels":{"q":true},"reviewer":"ann"}`); resp.StatusCode != 204 {
			t.Fatalf("PUT: %d %s", resp.StatusCode, body)
		}
	}
	want := calibrateJSON(t, append(strings.Fields("--target 0.9 --method weighted"+progressArgs), "--json", labels)...)
	for _, query := range []string{"target=0.9", "target=0.9&method=weighted"} {
		resp, body := s.call(t, http.MethodGet, "/review/progress?"+query, "")
		body = fromFile(body)
		if resp.StatusCode != 200 || string(body) != want {
			t.Errorf("%s: %d\n%s\nwant\n%s", query, resp.StatusCode, body, want)
		}
	}
	resp, body := s.call(t, http.MethodGet, "/review/progress?target=0.9&method=uniform", "")
	if resp.StatusCode != 422 || !strings.Contains(string(body), "--method weighted") {
		t.Errorf("method=uniform: %d %s, want 422 naming --method weighted", resp.StatusCode, body)
	}
}
