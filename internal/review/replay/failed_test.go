package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/review/calibrate"
	"github.com/systemone/systemone-gateway/internal/review/record"
	"github.com/systemone/systemone-gateway/simulator"
)

// sampleFixture is a review API holding n labelled entries of one yes/no
// question each, every one with its stored request, and the simulator as
// the upstream, behind a switch that fails the entries fail names (502,
// every attempt).
type sampleFixture struct {
	n        int
	labels   string // the /labels export
	review   *httptest.Server
	upstream *httptest.Server
	fail     func(entry int) bool
}

func sampleState(i int) string {
	return fmt.Sprintf("Delivery case %d: the parcel arrived %d days after the promised date.", i, i%9)
}

func newSampleFixture(t *testing.T, n int) *sampleFixture {
	f := &sampleFixture{n: n, fail: func(int) bool { return false }}
	f.review = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/review/labels" {
			io.WriteString(w, f.labels)
			return
		}
		var i int
		if _, err := fmt.Sscanf(r.URL.Path, "/review/items/%d-0", &i); err != nil || i < 1 || i > f.n {
			w.WriteHeader(404)
			return
		}
		fmt.Fprintf(w, `{"id":"%d-0","questions":[],"request":{"model":"service-1.0.0","state":%q,"questions":{"late":{"type":"noul","instructions":"Was it late?"}}}}`, i, sampleState(i))
	}))
	t.Cleanup(f.review.Close)
	unlimited := int64(0)
	sim, err := simulator.New(simulator.Handler{RequestsPerMinute: &unlimited, TokensPerSecond: &unlimited})
	if err != nil {
		t.Fatal(err)
	}
	f.upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct{ State string }
		_ = json.Unmarshal(body, &req)
		var i, days int
		fmt.Sscanf(req.State, "Delivery case %d: the parcel arrived %d", &i, &days)
		if f.fail(i) {
			w.WriteHeader(502)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(f.upstream.Close)
	return f
}

// setLabels writes the export: entry i's label is lab(i).
func (f *sampleFixture) setLabels(lab func(i int) bool) {
	var b strings.Builder
	for i := 1; i <= f.n; i++ {
		fmt.Fprintf(&b, `{"entry":"%d-0","request_id":"r%d","org":"acme","model":"service-1.0.0","type":"noul","question":"late","confidence":0.5,"answer":0.75,"label":%t,"agree":%t,"audit":true,"route":"auto","reviewer":"ann","ts":"2026-01-01T00:00:00Z"}`+"\n", i, i, lab(i), lab(i))
	}
	f.labels = b.String()
}

func (f *sampleFixture) replay(t *testing.T) (Summary, []record.Label) {
	t.Helper()
	var out bytes.Buffer
	sum, err := Run(context.Background(), Options{
		Review: f.review.URL + "/review", Upstream: f.upstream.URL, Model: "service-2.0.0", APIKey: "k",
		Sleep: func(context.Context, time.Duration) error { return nil },
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	var lines []record.Label
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		rec, err := record.ParseLabel([]byte(l))
		if err != nil {
			t.Fatalf("line %s: %v", l, err)
		}
		lines = append(lines, rec)
	}
	return sum, lines
}

// threshold calibrates lines at target 0.9 (the default method) and
// returns the noul threshold, +Inf when there is none: the higher, the
// fewer answers routed auto.
func threshold(t *testing.T, lines []record.Label) (float64, calibrate.Group) {
	t.Helper()
	s := calibrate.NewSample()
	for i := range lines {
		if err := s.AddLabel(&lines[i]); err != nil {
			t.Fatal(err)
		}
	}
	opts := calibrate.DefaultOptions()
	opts.Target = 0.9
	// The lines were labelled just now, one question an entry: labels
	// taken as final, each entry weighed as the one question it holds.
	opts.CorrectWithin = 0
	opts.MaxQuestions = 1
	res, err := s.Calibrate(opts)
	if err != nil || len(res.Groups) != 1 {
		t.Fatalf("calibrate: %v, %+v", err, res.Groups)
	}
	g := res.Groups[0]
	if !g.HasThreshold {
		return math.Inf(1), g
	}
	return g.Threshold, g
}

// TestFailedEntriesStayInTheSample: entries the new version did not answer
// are written as disagreements at confidence 1, so that calibrate counts
// each against every threshold: the threshold from a replay with failures
// is never lower than if those entries had been answered and disagreed,
// whatever their confidence, and the failures are all in the sample.
func TestFailedEntriesStayInTheSample(t *testing.T) {
	const n = 600
	f := newSampleFixture(t, n)

	// People's labels: the truth as service-2.0.0 sees it, agreeing more
	// often the more confident it is, as the simulator's versions do.
	f.setLabels(func(int) bool { return true })
	_, first := f.replay(t)
	rng := rand.New(rand.NewPCG(1, 2))
	truth := make(map[string]bool, n)
	for _, l := range first {
		var p float64
		_ = json.Unmarshal(l.Answer, &p)
		yes := p >= 0.5
		if rng.Float64() < 0.4*(1-*l.Confidence) {
			yes = !yes
		}
		truth[l.Entry] = yes
	}
	f.setLabels(func(i int) bool { return truth[fmt.Sprintf("%d-0", i)] })

	// Every answered: the baseline, and the same lines with the entries
	// about to fail turned into disagreements at their own confidence.
	failing := func(i int) bool { return i%40 == 7 }
	sum, answered := f.replay(t)
	if sum.Failed != 0 || sum.Replayed != n {
		t.Fatalf("baseline %+v", sum)
	}
	asDisagreements := make([]record.Label, len(answered))
	failed := 0
	for i, l := range answered {
		var e int
		fmt.Sscanf(l.Entry, "%d-0", &e)
		if failing(e) {
			l.Agree = false
			failed++
		}
		asDisagreements[i] = l
	}

	f.fail = failing
	sum, withFailures := f.replay(t)
	if sum.Failed != failed || sum.Replayed != n-failed {
		t.Fatalf("with failures %+v, want %d failed", sum, failed)
	}
	written := 0
	for _, l := range withFailures {
		if l.Route == record.RouteReplayFailed {
			written++
			if l.Agree || *l.Confidence != 1 || string(l.Answer) != "null" || l.Model != "service-2.0.0" {
				t.Errorf("a failed entry's line %+v: want a disagreement at confidence 1 of service-2.0.0", l)
			}
		}
	}
	if written != failed || len(withFailures) != n {
		t.Fatalf("%d lines for %d failed entries, %d lines in all: a failed entry is never dropped from the sample", written, failed, len(withFailures))
	}

	got, g := threshold(t, withFailures)
	bound, _ := threshold(t, asDisagreements)
	base, _ := threshold(t, answered)
	var kept []record.Label
	for _, l := range withFailures {
		if l.Route != record.RouteReplayFailed {
			kept = append(kept, l)
		}
	}
	dropped, _ := threshold(t, kept)
	t.Logf("thresholds: all answered %v, failures as disagreements at their confidence %v, as written %v, dropped %v", base, bound, got, dropped)
	if g.Labels != n {
		t.Errorf("calibrate counted %d labels, want all %d", g.Labels, n)
	}
	if got < bound {
		t.Errorf("threshold %v with failures written, below %v with them as disagreements: failures raised the chance of a wrong threshold", got, bound)
	}
	if dropped >= got {
		t.Errorf("dropping the failures gives threshold %v, not below %v: the scenario does not tell a dropped failure", dropped, got)
	}
}

// With --model an alias, failed entries are written under the concrete
// version that answered the others, even those that failed before any
// answer named it, in /labels order; when none answers at all, under
// --model as given, with memory bounded all the same.
func TestFailedEntriesUnderTheConcreteVersion(t *testing.T) {
	f := newSampleFixture(t, 6)
	f.setLabels(func(i int) bool { return i%2 == 0 })
	f.fail = func(i int) bool { return i <= 2 || i == 5 }
	run := func(model string) []record.Label {
		var out bytes.Buffer
		sum, err := Run(context.Background(), Options{
			Review: f.review.URL + "/review", Upstream: f.upstream.URL, Model: model, APIKey: "k", Concurrency: 2,
			Sleep: func(context.Context, time.Duration) error { return nil },
		}, &out)
		if err != nil {
			t.Fatal(err)
		}
		if sum.Failed+sum.Replayed != f.n {
			t.Fatalf("summary %+v", sum)
		}
		var lines []record.Label
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			rec, err := record.ParseLabel([]byte(l))
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, rec)
		}
		return lines
	}
	lines := run("service-preview") // the simulator answers it as service-1.0.0
	if len(lines) != 6 {
		t.Fatalf("%d lines, want 6", len(lines))
	}
	for i, l := range lines {
		if l.Entry != fmt.Sprintf("%d-0", i+1) || l.Model != "service-1.0.0" {
			t.Errorf("line %d: entry %s model %s, want entry %d-0 of service-1.0.0", i, l.Entry, l.Model, i+1)
		}
		if failed := l.Route == record.RouteReplayFailed; failed != f.fail(i+1) {
			t.Errorf("line %d: route %s", i, l.Route)
		}
	}

	f = newSampleFixture(t, maxPending+20)
	f.setLabels(func(int) bool { return true })
	f.fail = func(int) bool { return true }
	lines = run("service-preview")
	if len(lines) != f.n {
		t.Fatalf("%d lines, want %d", len(lines), f.n)
	}
	for _, l := range lines {
		if l.Model != "service-preview" || l.Route != record.RouteReplayFailed {
			t.Fatalf("line %+v: nothing answered, so the failures are written under --model", l)
		}
	}
}

// --limit takes the first n labelled entries of /labels; --dry-run sends
// nothing and lists them with the tokens the gateway would estimate.
func TestLimitAndDryRun(t *testing.T) {
	f := newSampleFixture(t, 10)
	f.setLabels(func(int) bool { return true })
	var calls atomic.Int64
	next := f.upstream.Config.Handler
	f.upstream.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		next.ServeHTTP(w, r)
	})
	run := func(opts Options) (Summary, string) {
		opts.Review, opts.Upstream, opts.Model, opts.APIKey = f.review.URL+"/review", f.upstream.URL, "service-2.0.0", "k"
		var out bytes.Buffer
		sum, err := Run(context.Background(), opts, &out)
		if err != nil {
			t.Fatal(err)
		}
		return sum, out.String()
	}
	sum, out := run(Options{Limit: 3, Concurrency: 4})
	if sum.Replayed != 3 || calls.Load() != 3 || strings.Count(out, "\n") != 3 || !strings.Contains(out, `"entry":"3-0"`) || strings.Contains(out, `"entry":"4-0"`) {
		t.Errorf("--limit 3: %+v, %d calls, output:\n%s", sum, calls.Load(), out)
	}

	calls.Store(0)
	sum, out = run(Options{DryRun: true, Limit: 4, Price: 1})
	if calls.Load() != 0 {
		t.Errorf("--dry-run sent %d requests", calls.Load())
	}
	var tokens int64
	for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var entry string
		var questions int
		var n int64
		if _, err := fmt.Sscanf(l, "entry %s questions %d tokens %d", &entry, &questions, &n); err != nil || entry != fmt.Sprintf("%d-0", i+1) || questions != 1 || n <= 0 {
			t.Errorf("dry run line %q", l)
		}
		body := fmt.Sprintf(`{"model":"service-2.0.0","state":%q,"questions":{"late":{"type":"noul","instructions":"Was it late?"}}}`, sampleState(i+1))
		req, err := evaluation.ParseRequest([]byte(body))
		if err != nil || req.EstimatedTokens != n {
			t.Errorf("entry %s: %d tokens, want the gateway's estimate %v (%v)", entry, n, req, err)
		}
		tokens += n
	}
	if sum.Replayed != 4 || sum.Tokens != tokens || sum.Cost != float64(tokens)/1e6 {
		t.Errorf("dry run summary %+v, want 4 entries, %d tokens at 1 yuan per million", sum, tokens)
	}
}
