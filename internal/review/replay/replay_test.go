package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/systemone/systemone-gateway/internal/review/record"
	"github.com/systemone/systemone-gateway/simulator"
)

func TestSetModel(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"model":"service-1.0.0","state":"x"}`, `{"model":"service-2.0.0","state":"x"}`},
		{`{ "state" : "x",  "model" : null , "q":{"model":"inner"} }`, `{ "state" : "x",  "model" : "service-2.0.0" , "q":{"model":"inner"} }`},
		{`{"state":"x"}`, `{"model":"service-2.0.0","state":"x"}`},
		{`{}`, `{"model":"service-2.0.0"}`},
		{` { } `, ` {"model":"service-2.0.0" } `},
		{`{"model":"a","model":"b","s":[1,"]",{"x":"}"}]}`, `{"model":"service-2.0.0","model":"service-2.0.0","s":[1,"]",{"x":"}"}]}`},
		{`{"mod\u0065l":"a","v":NaN,"w":-Infinity}`, `{"mod\u0065l":"service-2.0.0","v":NaN,"w":-Infinity}`},
		{"\xEF\xBB\xBF{\"state\":\"\\\"model\\\"\"}", "\xEF\xBB\xBF{\"model\":\"service-2.0.0\",\"state\":\"\\\"model\\\"\"}"},
	} {
		got, err := setModel([]byte(tt.in), "service-2.0.0")
		if err != nil || string(got) != tt.want {
			t.Errorf("setModel(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{`[]`, `"x"`, `{"a"}`, `{"a":1`, `{"a":"x`, ``} {
		if got, err := setModel([]byte(bad), "m"); err == nil {
			t.Errorf("setModel(%s) = %s, want an error", bad, got)
		}
	}
}

func TestRewriteLine(t *testing.T) {
	in := `{"entry":"1-0","request_id":"old","model":"service-1.0.0","confidence":0.5,"answer":0.75,"label":true,"agree":true,"audit":true,"route":"auto","audit_p":0.02,"extra":{"a": [1, 2]}}`
	got, err := rewriteLine([]byte(in), rewritten, map[string]json.RawMessage{
		"request_id": json.RawMessage(`"new"`), "model": json.RawMessage(`"service-2.0.0"`), "confidence": json.RawMessage(`0.9`),
		"answer": json.RawMessage(`0.05`), "agree": json.RawMessage(`false`), "route": json.RawMessage(`"replay"`),
	})
	want := `{"entry":"1-0","request_id":"new","model":"service-2.0.0","confidence":0.9,"answer":0.05,"label":true,"agree":false,"audit":true,"route":"replay","audit_p":0.02,"extra":{"a": [1, 2]}}`
	if err != nil || string(got) != want {
		t.Errorf("rewriteLine:\n%s\nwant\n%s (%v)", got, want, err)
	}
	got, _ = rewriteLine([]byte(`{"label":1}`), []string{"route", "model"}, map[string]json.RawMessage{"model": json.RawMessage(`"m"`), "route": json.RawMessage(`"replay"`)})
	if string(got) != `{"label":1,"route":"replay","model":"m"}` {
		t.Errorf("missing fields appended: %s", got)
	}
}

func TestAgree(t *testing.T) {
	for _, tt := range []struct {
		typ, label, answer string
		want               bool
	}{
		{"noul", "true", "0.5", true}, {"noul", "false", "0.49", true}, {"noul", "true", "0.3", false}, {"noul", "true", "null", false},
		{"choice", `"a"`, `"a"`, true}, {"choice", `"a"`, `"b"`, false}, {"choice", `"a"`, "null", false},
		{"score", "2", "2.5", true}, {"score", "2", "1.5", true}, {"score", "2", "2.51", false}, {"score", "0", "null", false},
	} {
		if got := record.Agree(tt.typ, json.RawMessage(tt.label), json.RawMessage(tt.answer)); got != tt.want {
			t.Errorf("Agree(%s, %s, %s) = %v", tt.typ, tt.label, tt.answer, got)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"3": 3 * time.Second, "0.5": 500 * time.Millisecond, "": 0, "soon": 0, "-1": 0,
		now.Add(7 * time.Second).Format(http.TimeFormat): 7 * time.Second,
	} {
		h := http.Header{}
		h.Set("Retry-After", v)
		if got := retryAfter(h, now); got != want {
			t.Errorf("retry-after %q: %v, want %v", v, got, want)
		}
	}
}

// fixture is a review API and an upstream on loopback: the upstream is the
// real simulator, behind a wrapper that fails some requests as told.
type fixture struct {
	review, upstream *httptest.Server
	mu               sync.Mutex
	calls            map[string]int // upstream calls per state
	seen             []*http.Request
	bodies           [][]byte
	reviewAuth       []string
}

const labelsNDJSON = `{"entry":"1-0","request_id":"r1","org":"acme","model":"service-1.0.0","type":"noul","question":"late","confidence":0.9,"answer":0.95,"label":true,"agree":true,"audit":true,"route":"auto","reviewer":"ann","ts":"2026-01-01T00:00:00Z","audit_p":0.25}
{"entry":"1-0","request_id":"r1","org":"acme","model":"service-1.0.0","type":"choice","question":"kind","confidence":0.5,"answer":"refund","label":"refund","agree":true,"audit":true,"route":"auto","reviewer":"ann","ts":"2026-01-01T00:00:00Z"}
{"entry":"2-0","request_id":"r2","org":"acme","model":"service-1.0.0","type":"noul","question":"late","confidence":0.1,"answer":0.45,"label":false,"agree":true,"audit":true,"route":"human","reviewer":"ann","ts":"2026-01-01T00:00:00Z"}
{"entry":"3-0","request_id":"r3","org":"acme","model":"service-1.0.0","type":"noul","question":"late","confidence":0.2,"answer":0.4,"label":false,"agree":true,"audit":true,"route":"human","reviewer":"bob","ts":"2026-01-01T00:00:00Z"}
{"entry":"4-0","request_id":"r4","org":"acme","model":"service-1.0.0","type":"noul","question":"late","confidence":0.2,"answer":0.4,"label":false,"agree":true,"audit":true,"route":"human","reviewer":"bob","ts":"2026-01-01T00:00:00Z"}
{"entry":"5-0","request_id":"r5","org":"acme","model":"service-1.0.0","type":"noul","question":"late","confidence":0.2,"answer":0.4,"label":false,"agree":true,"audit":true,"route":"human","reviewer":"bob","ts":"2026-01-01T00:00:00Z"}
{"entry":"6-0","request_id":"r6","org":"acme","model":"service-1.0.0","type":"noul","question":"late","confidence":0.2,"answer":0.4,"label":false,"agree":true,"audit":true,"route":"human","reviewer":"bob","ts":"2026-01-01T00:00:00Z"}
`

func request(state string) string {
	return `{"model":"service-1.0.0","state":"` + state + `","questions":{"late":{"type":"noul","instructions":"Was it late?"},"kind":{"type":"choice","instructions":"Which kind?","criteria":{"refund":null,"other":null}}}}`
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{calls: map[string]int{}}
	items := map[string]string{
		"1-0": `{"id":"1-0","questions":[],"request":` + request("ok one") + `}`,
		"2-0": `{"id":"2-0","questions":[]}`, // stored without include_content
		"4-0": `{"id":"4-0","questions":[],"request":` + request("flaky") + `}`,
		"5-0": `{"id":"5-0","questions":[],"request":` + request("down") + `}`,
		"6-0": `{"id":"6-0","questions":[],"request":` + request("refused") + `}`,
		// 3-0 is trimmed from the stream: 404
	}
	f.review = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.reviewAuth = append(f.reviewAuth, r.Header.Get("Authorization"))
		f.mu.Unlock()
		switch {
		case r.URL.Path == "/review/labels":
			w.Header().Set("Content-Type", "application/x-ndjson")
			io.WriteString(w, labelsNDJSON)
		case strings.HasPrefix(r.URL.Path, "/review/items/") && items[strings.TrimPrefix(r.URL.Path, "/review/items/")] != "":
			io.WriteString(w, items[strings.TrimPrefix(r.URL.Path, "/review/items/")])
		default:
			w.WriteHeader(404)
			io.WriteString(w, `{"detail":"not_found"}`)
		}
	}))
	t.Cleanup(f.review.Close)
	sim, err := simulator.New(simulator.Handler{})
	if err != nil {
		t.Fatal(err)
	}
	f.upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct{ State string }
		_ = json.Unmarshal(body, &req)
		f.mu.Lock()
		f.calls[req.State]++
		n := f.calls[req.State]
		f.seen = append(f.seen, r)
		f.bodies = append(f.bodies, body)
		f.mu.Unlock()
		switch {
		case req.State == "flaky" && n <= 2:
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(529)
			io.WriteString(w, `{"detail":"overloaded"}`)
			return
		case req.State == "down":
			w.WriteHeader(502)
			return
		case req.State == "refused":
			w.WriteHeader(400)
			io.WriteString(w, `{"detail":"guardrails_blocked"}`)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(f.upstream.Close)
	return f
}

func TestRun(t *testing.T) {
	f := newFixture(t)
	var sleeps []time.Duration
	var mu sync.Mutex
	opts := Options{
		Review: strings.Replace(f.review.URL, "http://", "http://ann:secret@", 1) + "/review/", Upstream: f.upstream.URL + "/",
		Model: "service-2.0.0", APIKey: "sk-test", Concurrency: 3,
		Sleep: func(_ context.Context, d time.Duration) error {
			mu.Lock()
			sleeps = append(sleeps, d)
			mu.Unlock()
			return nil
		},
	}
	var out, log bytes.Buffer
	opts.Log = &log
	sum, err := Run(context.Background(), opts, &out)
	if err != nil {
		t.Fatal(err)
	}
	// 1-0 and 4-0 (after two 529s) replayed, 2-0 (no request) and 3-0
	// (trimmed) skipped, 5-0 (502 three times) and 6-0 (400, not retried)
	// failed.
	if sum.Replayed != 2 || sum.Skipped != 2 || sum.Failed != 2 || sum.Tokens <= 0 {
		t.Errorf("summary %+v, log:\n%s", sum, log.String())
	}
	if want := fmt.Sprintf("replayed 2 skipped 2 failed 2 tokens %d cost ", sum.Tokens); !strings.HasPrefix(sum.String(), want) {
		t.Errorf("summary line %q", sum.String())
	}
	if f.calls["ok one"] != 1 || f.calls["flaky"] != 3 || f.calls["down"] != 3 || f.calls["refused"] != 1 {
		t.Errorf("upstream calls %v: want one per entry, retries only for 529 and 5xx, at most 3 attempts", f.calls)
	}
	slices.Sort(sleeps)
	if !slices.Equal(sleeps, []time.Duration{500 * time.Millisecond, time.Second, 3 * time.Second, 3 * time.Second}) {
		t.Errorf("sleeps %v: want retry-after 3s twice for the 529s, then backoff for the 502s", sleeps)
	}
	if !strings.Contains(log.String(), "entry 5-0: answered 502") || !strings.Contains(log.String(), "entry 6-0: answered 400 Bad Request: {\"detail\":\"guardrails_blocked\"}") {
		t.Errorf("log:\n%s", log.String())
	}
	for i, r := range f.seen {
		if r.Header.Get("X-Systemone-Replay") != "1" || r.Header.Get("Authorization") != "Bearer sk-test" || r.URL.Path != "/v1/systemone" {
			t.Errorf("upstream request %d: %s %v", i, r.URL.Path, r.Header)
		}
		var req struct{ State string }
		_ = json.Unmarshal(f.bodies[i], &req)
		if want := strings.Replace(request(req.State), `"service-1.0.0"`, `"service-2.0.0"`, 1); string(f.bodies[i]) != want {
			t.Errorf("body %s: only the model should change", f.bodies[i])
		}

	}
	for _, a := range f.reviewAuth {
		if a != "Basic YW5uOnNlY3JldA==" {
			t.Errorf("review API auth %q, want ann:secret as basic auth", a)
		}
	}

	// Five lines, in /labels order: 1-0's two questions, 4-0's one, then
	// the failed 5-0's and 6-0's, kept in the sample as disagreements.
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("output:\n%s", out.String())
	}
	var got []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	if got[0]["entry"] != "1-0" || got[0]["question"] != "late" || got[1]["question"] != "kind" || got[2]["entry"] != "4-0" ||
		got[3]["entry"] != "5-0" || got[4]["entry"] != "6-0" {
		t.Errorf("order: %v", got)
	}
	// A failed entry's lines: a disagreement at confidence 1 (against
	// every threshold), no answer, route replay_failed, under the version
	// that answered the others; the rest as the original line.
	for i, want := range []string{
		`{"entry":"5-0","request_id":"r5","org":"acme","model":"service-2.0.0","type":"noul","question":"late","confidence":1,"answer":null,"label":false,"agree":false,"audit":true,"route":"replay_failed","reviewer":"bob","ts":"2026-01-01T00:00:00Z"}`,
		`{"entry":"6-0","request_id":"r6","org":"acme","model":"service-2.0.0","type":"noul","question":"late","confidence":1,"answer":null,"label":false,"agree":false,"audit":true,"route":"replay_failed","reviewer":"bob","ts":"2026-01-01T00:00:00Z"}`,
	} {
		if lines[3+i] != want {
			t.Errorf("failed entry's line\n%s\nwant\n%s", lines[3+i], want)
		}
	}
	for _, m := range got[:3] {
		if m["model"] != "service-2.0.0" || m["route"] != "replay" || !strings.HasPrefix(m["request_id"].(string), "req_") ||
			m["reviewer"] == nil || m["ts"] != "2026-01-01T00:00:00Z" || m["org"] != "acme" || m["audit"] != true {
			t.Errorf("line %v", m)
		}
		if m["type"] == "noul" {
			p := m["answer"].(float64)
			if c := m["confidence"].(float64); c != roundNoul(p) {
				t.Errorf("noul confidence %v of answer %v", c, p)
			}
			if m["agree"] != ((p >= 0.5) == m["label"].(bool)) {
				t.Errorf("agree %v of label %v, answer %v", m["agree"], m["label"], p)
			}
		}
	}
	if got[0]["audit_p"] != 0.25 || !strings.Contains(lines[0], `"audit_p":0.25`) {
		t.Errorf("an extra field is lost: %s", lines[0])
	}
}

func roundNoul(p float64) float64 {
	d := 2*p - 1
	if d < 0 {
		d = -d
	}
	return float64(int64(d*1e9+0.5)) / 1e9
}

// runCommand runs the replay command as Caddy's CLI sets it up.
func runCommand(t *testing.T, apiKey string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runCommandWaiting(t, apiKey, sleep, args...)
}

// runCommandWaiting runs the command as runCommand does, waiting before a
// retry with wait.
func runCommandWaiting(t *testing.T, apiKey string, wait func(context.Context, time.Duration) error, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := &cobra.Command{Use: "replay", SilenceUsage: true, SilenceErrors: true}
	setUp(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return run(cmd, apiKey, wait) }
	var out, errb bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	err = cmd.Execute()
	return out.String(), errb.String(), err
}

func TestCommand(t *testing.T) {
	f := newFixture(t)
	_, _, err := runCommand(t, "", "--review", f.review.URL+"/review", "--upstream", f.upstream.URL, "--model", "m")
	if err == nil || !strings.Contains(err.Error(), "missing SYSTEMONE_API_KEY") {
		t.Errorf("no key: %v", err)
	}
	_, _, err = runCommand(t, "k", "--review", f.review.URL+"/review", "--upstream", f.upstream.URL)
	if err == nil || !strings.Contains(err.Error(), "missing --model") {
		t.Errorf("no model: %v", err)
	}
	_, _, err = runCommand(t, "k", "--review", "http://ann:pw@127.0.0.1:1/review", "--upstream", f.upstream.URL, "--model", "m")
	if err == nil || strings.Contains(err.Error(), "pw") || !strings.Contains(err.Error(), "GET http://ann:xxxxx@127.0.0.1:1/review/labels") {
		t.Errorf("unreachable review API: %v", err)
	}
	// Two entries fail: the lines of the others are written, the summary
	// is the last line on standard error, and the exit status is 1. The
	// waits are the command's, not taken.
	var waited atomic.Int64 // the replay's workers wait concurrently
	noWait := func(context.Context, time.Duration) error { waited.Add(1); return nil }
	out := t.TempDir() + "/replayed.ndjson"
	stdout, stderr, err := runCommandWaiting(t, "k", noWait, "--review", f.review.URL+"/review", "--upstream", f.upstream.URL, "--model", "service-2.0.0", "--out", out, "--price", "1")
	if err == nil || stdout != "" || waited.Load() != 4 {
		t.Errorf("with failures: err %v, stdout %q, %d waits", err, stdout, waited.Load())
	}
	errLines := strings.Split(strings.TrimSpace(stderr), "\n")
	last := errLines[len(errLines)-1]
	var tokens int64
	if n, _ := fmt.Sscanf(last, "replayed 2 skipped 2 failed 2 tokens %d cost", &tokens); n != 1 || !strings.HasSuffix(last, " cost "+strconv.FormatFloat(float64(tokens)/1e6, 'f', -1, 64)) {
		t.Errorf("stderr:\n%s", stderr)
	}
	data, _ := os.ReadFile(out)
	if strings.Count(string(data), "\n") != 5 || !strings.Contains(string(data), `"route":"replay"`) || strings.Count(string(data), `"route":"replay_failed"`) != 2 {
		t.Errorf("--out file:\n%s", data)
	}
}
