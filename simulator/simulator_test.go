package simulator

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/systemone/systemone-gateway/evaluation"
)

const testKey = "sk-test"

// smallBody has one question of each type; its answer is under 500 bytes.
const smallBody = `{
	"state": "The customer asked for a refund and the agent said no.",
	"questions": {
		"polite": {"type": "noul", "instructions": "Was the agent polite?"},
		"topic": {"type": "choice", "instructions": "What is it about?", "criteria": {"refund": null, "delivery": "late parcels", "other": null}},
		"quality": {"type": "score", "instructions": "Rate the answer.", "criteria": ["bad", "poor", "good", "great"]}
	}
}`

// bigBody's answer is over 500 bytes, so it is gzipped when allowed.
var bigBody = func() string {
	var qs []string
	for i := range 12 {
		qs = append(qs, fmt.Sprintf(`"q%d": {"type": "choice", "instructions": "Which one?", "criteria": {"alpha": null, "beta": null, "gamma": null}}`, i))
	}
	return `{"state": "some state", "questions": {` + strings.Join(qs, ",") + `}}`
}()

type answerJSON struct {
	Type          string             `json:"type"`
	Noul          *float64           `json:"noul"`
	Choice        string             `json:"choice"`
	Score         *float64           `json:"score"`
	Legend        map[string]string  `json:"legend"`
	Probabilities map[string]float64 `json:"probabilities"`
	Confidence    *float64           `json:"confidence"`
}

type responseJSON struct {
	Model   string                `json:"model"`
	Answers map[string]answerJSON `json:"answers"`
	Usage   struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
}

// newHandler builds the simulator with the limits off unless the test sets
// them, and a clock that stands still unless the test moves it.
func newHandler(t testing.TB, h Handler) http.Handler {
	t.Helper()
	off := int64(0)
	if h.RequestsPerMinute == nil {
		h.RequestsPerMinute = &off
	}
	if h.TokensPerSecond == nil {
		h.TokensPerSecond = &off
	}
	if h.now == nil {
		at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
		h.now = func() time.Time { return at }
	}
	handler, err := New(h)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return handler
}

// do sends a request; headers are name, value pairs. Authorization is
// Bearer testKey unless given.
func do(handler http.Handler, method, path, body string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	return rec
}

func evaluate(handler http.Handler, body string, headers ...string) *httptest.ResponseRecorder {
	return do(handler, http.MethodPost, "/v1/systemone", body, headers...)
}

func decodeResponse(t *testing.T, rec *httptest.ResponseRecorder) responseJSON {
	t.Helper()
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", rec.Code, rec.Body)
	}
	var resp responseJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatalf("decoding %s: %v", rec.Body, err)
	}
	return resp
}

func wantDetail(t *testing.T, rec *httptest.ResponseRecorder, status int, detail string) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d: %s", rec.Code, status, rec.Body)
	}
	var body struct {
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Detail != detail {
		t.Fatalf("body %s, want detail %q", rec.Body, detail)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("content-type %q, want application/json", ct)
	}
}

// hundredths returns p in whole hundredths, failing when it has more decimals.
func hundredths(t *testing.T, what string, p float64) int {
	t.Helper()
	h := math.Round(p * 100)
	if math.Abs(p*100-h) > 1e-9 {
		t.Errorf("%s = %v: not whole hundredths", what, p)
	}
	return int(h)
}

// checkAnswer checks the seed's numeric rules on one answer.
func checkAnswer(t *testing.T, id string, a answerJSON, options []string) {
	t.Helper()
	switch a.Type {
	case "noul":
		if a.Noul == nil || *a.Noul < 0 || *a.Noul > 1 {
			t.Fatalf("%s: noul %v out of 0..1", id, deref(a.Noul))
		}
		hundredths(t, id+" noul", *a.Noul)
	case "choice", "score":
		if len(a.Probabilities) != len(options) {
			t.Fatalf("%s: %d probabilities, want %d", id, len(a.Probabilities), len(options))
		}
		total, peak, peakKey := 0, -1, ""
		for _, key := range options {
			p, ok := a.Probabilities[key]
			if !ok {
				t.Fatalf("%s: no probability for %q", id, key)
			}
			h := hundredths(t, id+" probability", p)
			total += h
			if h > peak {
				peak, peakKey = h, key
			}
		}
		if total != 100 {
			t.Fatalf("%s: probabilities sum to %d hundredths", id, total)
		}
		n := float64(len(options))
		var want float64
		if a.Type == "choice" {
			if a.Choice != peakKey {
				t.Errorf("%s: choice %q, want the first most probable %q", id, a.Choice, peakKey)
			}
			want = 1
			if n > 1 {
				want = (n*float64(peak)/100 - 1) / (n - 1)
			}
		} else {
			want = float64(peak) / 100
			score := 0.0
			for i := range options {
				score += float64(i) * a.Probabilities[strconv.Itoa(i)]
			}
			if a.Score == nil || math.Abs(*a.Score-score) > 1e-9 {
				t.Errorf("%s: score %v, want %v", id, deref(a.Score), score)
			}
		}
		// Rounded to four decimals.
		if a.Confidence == nil || math.Abs(*a.Confidence-want) > 0.00005+1e-12 {
			t.Errorf("%s: confidence %v, want %v", id, deref(a.Confidence), want)
		}
	default:
		t.Fatalf("%s: type %q", id, a.Type)
	}
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

func TestSmallAnswer(t *testing.T) {
	rec := evaluate(newHandler(t, Handler{}), smallBody)
	resp := decodeResponse(t, rec)
	if resp.Model != DefaultVersion {
		t.Errorf("model %q, want %q", resp.Model, DefaultVersion)
	}
	if len(resp.Answers) != 3 {
		t.Fatalf("answers %v, want 3", resp.Answers)
	}
	checkAnswer(t, "polite", resp.Answers["polite"], nil)
	checkAnswer(t, "topic", resp.Answers["topic"], []string{"refund", "delivery", "other"})
	checkAnswer(t, "quality", resp.Answers["quality"], []string{"0", "1", "2", "3"})
	wantLegend := map[string]string{"0": "bad", "1": "poor", "2": "good", "3": "great"}
	for k, v := range wantLegend {
		if resp.Answers["quality"].Legend[k] != v {
			t.Errorf("legend %v, want %v", resp.Answers["quality"].Legend, wantLegend)
		}
	}

	// Answers keep the request's question order.
	body := rec.Body.String()
	if i, j, k := strings.Index(body, `"polite"`), strings.Index(body, `"topic"`), strings.Index(body, `"quality"`); !(i < j && j < k) {
		t.Errorf("answers not in request order: %s", body)
	}
	if !regexp.MustCompile(`^req_[0-9a-f]{24}$`).MatchString(rec.Header().Get("X-Request-Id")) {
		t.Errorf("x-request-id %q", rec.Header().Get("X-Request-Id"))
	}
	for _, h := range []string{"X-Service-Model-Ms", "X-Service-Total-Ms"} {
		if _, err := strconv.Atoi(rec.Header().Get(h)); err != nil {
			t.Errorf("%s %q: not whole milliseconds", h, rec.Header().Get(h))
		}
	}
	if rec.Header().Get("Retry-After") != "" || rec.Header().Get("Content-Encoding") != "" {
		t.Errorf("unexpected headers %v", rec.Header())
	}
	if resp.Usage.InputTokens <= 0 || resp.Usage.OutputTokens != 3*outputPerQuestion {
		t.Errorf("usage %+v", resp.Usage)
	}

	// The gateway reads it.
	read, err := evaluation.ParseResponse(rec.Body.Bytes())
	if err != nil {
		t.Fatalf("evaluation.ParseResponse: %v", err)
	}
	if read.Model != DefaultVersion || !read.HasUsage || read.InputTokens != resp.Usage.InputTokens || len(read.Answers) != 3 {
		t.Errorf("evaluation.ParseResponse read %+v", read)
	}
	for _, a := range read.Answers {
		if a.HasNoul != (a.Type == "noul") || a.HasConfidence != (a.Type != "noul") {
			t.Errorf("evaluation.ParseResponse read answer %+v", a)
		}
	}
}

func TestRequestIDsAreUnique(t *testing.T) {
	h := newHandler(t, Handler{})
	seen := make(map[string]bool)
	for range 100 {
		id := evaluate(h, smallBody).Header().Get("X-Request-Id")
		if seen[id] {
			t.Fatalf("x-request-id %s repeated", id)
		}
		seen[id] = true
	}
}

// TestRulesOverManyRequests checks the numeric rules on the answers to many
// different requests, of every size the seed allows.
func TestRulesOverManyRequests(t *testing.T) {
	h := newHandler(t, Handler{})
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 200 {
		nChoice := 1 + rng.IntN(255)
		nTiers := 2 + rng.IntN(9)
		options := make([]string, nChoice)
		criteria := make([]string, nChoice)
		for j := range options {
			options[j] = fmt.Sprintf("option%d", j)
			criteria[j] = fmt.Sprintf("%q: null", options[j])
		}
		tiers := make([]string, nTiers)
		tierKeys := make([]string, nTiers)
		for j := range tiers {
			tiers[j] = fmt.Sprintf(`"tier %d"`, j)
			tierKeys[j] = strconv.Itoa(j)
		}
		body := fmt.Sprintf(`{"state": "request %d", "questions": {
			"c": {"type": "choice", "instructions": "pick", "criteria": {%s}},
			"s": {"type": "score", "instructions": "rate", "criteria": [%s]},
			"n": {"type": "noul", "instructions": "yes?"}}}`,
			i, strings.Join(criteria, ","), strings.Join(tiers, ","))
		resp := decodeResponse(t, evaluate(h, body))
		checkAnswer(t, "c", resp.Answers["c"], options)
		checkAnswer(t, "s", resp.Answers["s"], tierKeys)
		checkAnswer(t, "n", resp.Answers["n"], nil)
	}
}

func TestDeterministic(t *testing.T) {
	h := newHandler(t, Handler{})
	first := evaluate(h, bigBody).Body.String()
	if again := evaluate(h, bigBody).Body.String(); again != first {
		t.Fatalf("same request, different answers:\n%s\n%s", first, again)
	}
	// A new handler (another process) answers the same.
	if other := evaluate(newHandler(t, Handler{}), bigBody).Body.String(); other != first {
		t.Fatalf("another handler answers differently:\n%s\n%s", first, other)
	}
	// Another version or state changes the answers.
	if v2 := evaluate(h, bigBody, "X-Simulator-Version", "service-2.0.0").Body.String(); sameAnswers(t, v2, first) {
		t.Errorf("another version gives the same answers to 12 questions")
	}
	otherState := strings.Replace(bigBody, "some state", "another state", 1)
	if s := evaluate(h, otherState).Body.String(); sameAnswers(t, s, first) {
		t.Errorf("another state gives the same answers to 12 questions")
	}
}

func sameAnswers(t *testing.T, a, b string) bool {
	t.Helper()
	var ra, rb struct {
		Answers json.RawMessage `json:"answers"`
	}
	if json.Unmarshal([]byte(a), &ra) != nil || json.Unmarshal([]byte(b), &rb) != nil {
		t.Fatalf("not JSON: %s / %s", a, b)
	}
	return bytes.Equal(ra.Answers, rb.Answers)
}

func TestModelResolution(t *testing.T) {
	body := func(model string) string {
		return `{"state": "s", ` + model + ` "questions": {"q": {"type": "noul", "instructions": "yes?"}}}`
	}
	for _, tc := range []struct {
		name    string
		config  string // Handler.Version
		model   string // the body's model member, with its comma
		version string // X-Simulator-Version
		want    string // "" for 404
	}{
		{"omitted", "", ``, "", DefaultVersion},
		{"latest", "", `"model": "service-latest",`, "", DefaultVersion},
		{"preview", "", `"model": "service-preview",`, "", DefaultVersion},
		{"configured version", "service-1.1.0", `"model": "service-latest",`, "", "service-1.1.0"},
		{"configured version, omitted", "service-1.1.0", ``, "", "service-1.1.0"},
		{"version header", "service-1.1.0", `"model": "service-preview",`, "service-2.0.0", "service-2.0.0"},
		{"version header, omitted", "", ``, "service-2.0.0", "service-2.0.0"},
		{"version identifier", "", `"model": "service-3.14.15",`, "", "service-3.14.15"},
		{"version identifier beats header", "", `"model": "service-1.0.0",`, "service-2.0.0", "service-1.0.0"},
		{"unknown", "", `"model": "gpt-4",`, "", ""},
		{"case matters", "", `"model": "Service-Latest",`, "", ""},
		{"partial version", "", `"model": "service-1.0",`, "", ""},
		{"version with suffix", "", `"model": "service-1.0.0-beta",`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandler(t, Handler{Version: tc.config})
			var headers []string
			if tc.version != "" {
				headers = []string{"X-Simulator-Version", tc.version}
			}
			rec := evaluate(h, body(tc.model), headers...)
			if tc.want == "" {
				wantDetail(t, rec, http.StatusNotFound, "model_not_found")
				return
			}
			if got := decodeResponse(t, rec).Model; got != tc.want {
				t.Errorf("model %q, want %q", got, tc.want)
			}
		})
	}
}

// The seed types `model` as a string, with a default when it is omitted:
// null is a validation error, not the default.
func TestNullModel(t *testing.T) {
	h := newHandler(t, Handler{})
	rec := evaluate(h, `{"state": "s", "model": null, "questions": {"q": {"type": "noul", "instructions": "yes?"}}}`)
	want := `{"detail":[{"type":"string_type","loc":["body","model"],"msg":"Input should be a valid string","input":null}]}`
	if rec.Code != http.StatusUnprocessableEntity || rec.Body.String() != want {
		t.Errorf("status %d body %s, want 422 %s", rec.Code, rec.Body, want)
	}
}

func TestModels(t *testing.T) {
	rec := do(newHandler(t, Handler{}), http.MethodGet, "/v1/models", "")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var body struct {
		Models []struct {
			Name        string `json:"name"`
			Description string `json:"description"`
			ReleaseDate string `json:"release_date"`
		} `json:"models"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range body.Models {
		names = append(names, m.Name)
		if m.Description == "" {
			t.Errorf("%s: no description", m.Name)
		}
		if _, err := time.Parse(time.DateOnly, m.ReleaseDate); err != nil {
			t.Errorf("%s: release_date %q is not YYYY-MM-DD", m.Name, m.ReleaseDate)
		}
	}
	if strings.Join(names, ",") != "service-latest,service-preview" {
		t.Errorf("models %v, want the two aliases", names)
	}
}

func TestUnauthorized(t *testing.T) {
	open := newHandler(t, Handler{})
	closed := newHandler(t, Handler{Keys: []string{"sk-a", "sk-b"}})
	for _, tc := range []struct {
		name    string
		handler http.Handler
		auth    string
		ok      bool
	}{
		{"missing", open, "", false},
		{"scheme only", open, "Bearer", false},
		{"empty key", open, "Bearer   ", false},
		{"basic", open, "Basic c2stYTo=", false},
		{"any key", open, "Bearer whatever", true},
		{"lower-case scheme", open, "bearer whatever", true},
		{"listed key", closed, "Bearer sk-b", true},
		{"unlisted key", closed, "Bearer sk-c", false},
		{"prefix of a key", closed, "Bearer sk-", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/systemone", "/v1/models"} {
				method := http.MethodPost
				if path == "/v1/models" {
					method = http.MethodGet
				}
				rec := do(tc.handler, method, path, smallBody, "Authorization", tc.auth)
				if tc.ok {
					if rec.Code != http.StatusOK {
						t.Errorf("%s: status %d, want 200: %s", path, rec.Code, rec.Body)
					}
					continue
				}
				wantDetail(t, rec, http.StatusUnauthorized, "invalid_api_key")
			}
		})
	}
}

func TestOtherPaths(t *testing.T) {
	h := newHandler(t, Handler{})
	for _, path := range []string{"/", "/v1", "/v1/systemone/", "/v2/systemone", "/v1/model"} {
		wantDetail(t, do(h, http.MethodPost, path, smallBody), http.StatusNotFound, "Not Found")
	}
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodGet, "/v1/systemone", "POST"},
		{http.MethodPost, "/v1/models", "GET"},
	} {
		rec := do(h, tc.method, tc.path, "")
		wantDetail(t, rec, http.StatusMethodNotAllowed, "Method Not Allowed")
		if rec.Header().Get("Allow") != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, rec.Header().Get("Allow"), tc.allow)
		}
	}
}

// TestCaddyHandler serves through the Caddy middleware interface: the
// simulator answers every path itself and never calls next.
func TestCaddyHandler(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	h := &Handler{Version: "service-1.2.3"}
	if err := h.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		t.Error("next handler called")
		return nil
	})
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/v1/systemone", http.StatusOK},
		{"/elsewhere", http.StatusNotFound},
	} {
		req := httptest.NewRequest(http.MethodPost, tc.path, strings.NewReader(smallBody))
		req.Header.Set("Authorization", "Bearer k")
		rec := httptest.NewRecorder()
		req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), rec, &caddyhttp.Server{})
		if err := h.ServeHTTP(rec, req, next); err != nil {
			t.Fatal(err)
		}
		if rec.Code != tc.status {
			t.Errorf("%s: status %d, want %d", tc.path, rec.Code, tc.status)
		}
	}
}

func TestValidate(t *testing.T) {
	neg := int64(-1)
	for _, tc := range []struct {
		name string
		h    Handler
	}{
		{"version with space", Handler{Version: "service 1"}},
		{"negative latency", Handler{Latency: caddy.Duration(-time.Second)}},
		{"overloaded word", Handler{Overloaded: "sometimes"}},
		{"overloaded fraction 1.5", Handler{Overloaded: "1.5"}},
		{"overloaded negative", Handler{Overloaded: "-2"}},
		{"empty key", Handler{Keys: []string{""}}},
		{"key with space", Handler{Keys: []string{"a b"}}},
		{"negative rpm", Handler{RequestsPerMinute: &neg}},
		{"negative tps", Handler{TokensPerSecond: &neg}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.h); err == nil {
				t.Error("New accepted the configuration")
			}
		})
	}
}

func TestTooLarge(t *testing.T) {
	h := newHandler(t, Handler{})
	body := `{"state": "` + strings.Repeat("a", maxBody) + `"}`
	wantDetail(t, evaluate(h, body), http.StatusRequestEntityTooLarge, "request_too_large")
}

func TestValidationError(t *testing.T) {
	h := newHandler(t, Handler{})
	for _, tc := range []struct{ body, want string }{
		{`not json`, `{"detail":[{"type":"json_invalid","loc":["body",0],"msg":"JSON decode error","input":{},"ctx":{"error":"Expecting value"}}]}`},
		{`{"state": `, `{"detail":[{"type":"json_invalid","loc":["body",10],"msg":"JSON decode error","input":{},"ctx":{"error":"Expecting value"}}]}`},
		{``, `{"detail":[{"type":"json_invalid","loc":["body",0],"msg":"JSON decode error","input":{},"ctx":{"error":"Expecting value"}}]}`},
		{`{"state": "s"}`, `{"detail":[{"type":"missing","loc":["body","questions"],"msg":"Field required","input":{"state":"s"}}]}`},
		{`{"state": "s", "questions": {"q": {"type": "score", "instructions": "x", "criteria": ["a"]}}}`,
			`{"detail":[{"type":"too_short","loc":["body","questions","q","score","criteria"],"msg":"List should have at least 2 items after validation, not 1","input":["a"],"ctx":{"field_type":"List","min_length":2,"actual_length":1}}]}`},
		{choiceBody(256, false), `{"detail":"Too many choices. Must have at most 255 choices."}`},
	} {
		rec := evaluate(h, tc.body)
		if rec.Code != http.StatusUnprocessableEntity || rec.Body.String() != tc.want {
			t.Errorf("%.80q: status %d body %s, want 422 %s", tc.body, rec.Code, rec.Body, tc.want)
		}
	}
}

func TestMaxTokens(t *testing.T) {
	h := newHandler(t, Handler{})
	// body has a state of state tokens and one question per entry of
	// questions, each costing that many tokens with its overhead.
	body := func(state int, questions ...int) string {
		words := func(n int) string { return strings.TrimSpace(strings.Repeat("a ", n)) }
		var qs []string
		for i, n := range questions {
			qs = append(qs, fmt.Sprintf(`"q%d": {"type": "noul", "instructions": %q}`, i, words(n-questionOverhead)))
		}
		return fmt.Sprintf(`{"state": %q, "questions": {%s}}`, words(state), strings.Join(qs, ","))
	}
	for _, tc := range []struct {
		name      string
		body      string
		wantUsage int64 // 0: refused
	}{
		{"state and longest question at 32000", body(31000, 1000, 1000), 33000},
		{"state and longest question over 32000", body(31000, 1001, 10), 0},
		{"total at 64000", body(1000, 21000, 21000, 21000), 64000},
		{"total over 64000", body(1001, 21000, 21000, 21000), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := evaluate(h, tc.body)
			if tc.wantUsage == 0 {
				wantDetail(t, rec, http.StatusUnprocessableEntity, "max_tokens_exceeded")
				return
			}
			if got := decodeResponse(t, rec).Usage.InputTokens; got != tc.wantUsage {
				t.Errorf("input_tokens %d, want %d", got, tc.wantUsage)
			}
		})
	}
}

// TestMaxTokensSettings: the budgets can be moved, and 0 lifts them.
func TestMaxTokensSettings(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	state := strings.TrimSpace(strings.Repeat("a ", 40000)) // 40000 tokens
	body := `{"state": "` + state + `", "questions": {"q": {"type": "noul", "instructions": "Ok?"}}}`
	for _, tc := range []struct {
		name               string
		total, perQuestion *int64
		ok                 bool
	}{
		{"defaults", nil, nil, false},
		{"question budget off", nil, n(0), true},
		{"question budget raised", nil, n(50000), true},
		{"total budget under the request", n(30000), n(0), false},
		{"both off", n(0), n(0), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := evaluate(newHandler(t, Handler{MaxTokens: tc.total, MaxQuestionTokens: tc.perQuestion}), body)
			if !tc.ok {
				wantDetail(t, rec, http.StatusUnprocessableEntity, "max_tokens_exceeded")
				return
			}
			if got := decodeResponse(t, rec).Usage.InputTokens; got != 40000+questionOverhead+2 {
				t.Errorf("input_tokens %d, want %d", got, 40000+questionOverhead+2)
			}
		})
	}
	if err := (&Handler{MaxTokens: n(-1)}).Validate(); err == nil {
		t.Error("Validate accepted max_tokens -1")
	}
}

// TestStateCountedOnce: a second question adds its own tokens, not the
// state's again.
func TestStateCountedOnce(t *testing.T) {
	h := newHandler(t, Handler{})
	state := strings.Repeat("word ", 100) // 100 tokens
	one := decodeResponse(t, evaluate(h, `{"state": "`+state+`", "questions": {"a": {"type": "noul", "instructions": "Is it ok?"}}}`))
	two := decodeResponse(t, evaluate(h, `{"state": "`+state+`", "questions": {"a": {"type": "noul", "instructions": "Is it ok?"}, "b": {"type": "noul", "instructions": "Is it ok?"}}}`))
	question := int64(questionOverhead + 4) // Is it ok ? is 4 tokens
	if one.Usage.InputTokens != 100+question || two.Usage.InputTokens != 100+2*question {
		t.Errorf("input_tokens %d and %d, want %d and %d", one.Usage.InputTokens, two.Usage.InputTokens, 100+question, 100+2*question)
	}
}

func TestRequestsPerMinute(t *testing.T) {
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	rpm := int64(2)
	h := newHandler(t, Handler{RequestsPerMinute: &rpm, now: func() time.Time { return at }})
	for range 2 {
		decodeResponse(t, evaluate(h, smallBody))
	}
	rec := evaluate(h, smallBody)
	wantDetail(t, rec, http.StatusTooManyRequests, "Rate limit exceeded: 2 requests per minute")
	if got := rec.Header().Get("Retry-After"); got != "30" {
		t.Errorf("retry-after %q, want 30 (one request refills in 60/2 s)", got)
	}
	// Another key has its own bucket.
	decodeResponse(t, evaluate(h, smallBody, "Authorization", "Bearer sk-other"))

	at = at.Add(29 * time.Second)
	rec = evaluate(h, smallBody)
	wantDetail(t, rec, http.StatusTooManyRequests, "Rate limit exceeded: 2 requests per minute")
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Errorf("retry-after %q, want 1", got)
	}
	at = at.Add(time.Second)
	decodeResponse(t, evaluate(h, smallBody))
}

func TestTokensPerSecond(t *testing.T) {
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	tps := int64(100)
	h := newHandler(t, Handler{TokensPerSecond: &tps, now: func() time.Time { return at }})
	body := `{"state": "` + strings.Repeat("a ", 30000) + `", "questions": {"q": {"type": "noul", "instructions": "ok"}}}`
	cost := decodeResponse(t, evaluate(h, body)).Usage.InputTokens // 30005
	decodeResponse(t, evaluate(h, body))                           // 64000 - 2*30005 = 3990 left
	rec := evaluate(h, body)
	wantDetail(t, rec, http.StatusTooManyRequests, "Rate limit exceeded: 100 tokens per second")
	wait := int64(math.Ceil(float64(cost-(tokenBurst-2*cost)) / 100))
	if got := rec.Header().Get("Retry-After"); got != strconv.FormatInt(wait, 10) {
		t.Errorf("retry-after %q, want %d", got, wait)
	}
	at = at.Add(time.Duration(wait) * time.Second)
	decodeResponse(t, evaluate(h, body))
}

// TestOverCapacityCharged: a request costing more than the bucket holds is
// charged the capacity, so it gets through once the bucket is full.
func TestOverCapacityCharged(t *testing.T) {
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	l := newLimiter(0, 1000, func() time.Time { return at })
	if ok, _, _ := l.admit("k", 100000); !ok {
		t.Fatal("a full bucket refused a request over its capacity")
	}
	ok, retry, _ := l.admit("k", 100000)
	if ok || retry != 64 {
		t.Fatalf("second request: ok %v, retry-after %d; want refused for 64 s", ok, retry)
	}
	at = at.Add(64 * time.Second)
	if ok, _, _ := l.admit("k", 100000); !ok {
		t.Fatal("refused after the bucket refilled")
	}
}

func TestLimiterForgetsIdleKeys(t *testing.T) {
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	l := newLimiter(60, 1000, func() time.Time { return at })
	for i := range 100 {
		l.admit(fmt.Sprintf("k%d", i), 10)
	}
	at = at.Add(2 * time.Minute)
	l.admit("fresh", 10)
	if len(l.keys) != 1 {
		t.Errorf("%d keys held after all but one went idle, want 1", len(l.keys))
	}
}

func TestRetryAfterAtLeastOneSecond(t *testing.T) {
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	l := newLimiter(300, 0, func() time.Time { return at })
	for range 300 {
		l.admit("k", 1)
	}
	if ok, retry, _ := l.admit("k", 1); ok || retry != 1 {
		t.Errorf("ok %v, retry-after %d; want refused for 1 s (0.2 s rounded up)", ok, retry)
	}
}

func TestOverloaded(t *testing.T) {
	t.Run("always", func(t *testing.T) {
		h := newHandler(t, Handler{Overloaded: "always"})
		for range 3 {
			rec := evaluate(h, smallBody)
			wantDetail(t, rec, 529, "overloaded")
			if rec.Header().Get("Retry-After") != "" {
				t.Error("retry-after on 529")
			}
		}
	})
	t.Run("first n", func(t *testing.T) {
		h := newHandler(t, Handler{Overloaded: "2"})
		// Requests refused before the overload step don't count.
		wantDetail(t, evaluate(h, `{"state": "s", "model": "nope", "questions": {"q": {"type": "noul", "instructions": "x"}}}`),
			http.StatusNotFound, "model_not_found")
		wantDetail(t, evaluate(h, smallBody), 529, "overloaded")
		wantDetail(t, evaluate(h, smallBody), 529, "overloaded")
		for range 3 {
			decodeResponse(t, evaluate(h, smallBody))
		}
	})
	t.Run("fraction", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 8))
		h := newHandler(t, Handler{Overloaded: "0.3", random: rng.Float64})
		overloaded := 0
		for range 1000 {
			if evaluate(h, smallBody).Code == 529 {
				overloaded++
			}
		}
		if overloaded < 250 || overloaded > 350 {
			t.Errorf("%d of 1000 requests overloaded, want about 300", overloaded)
		}
	})
	t.Run("header", func(t *testing.T) {
		h := newHandler(t, Handler{})
		wantDetail(t, evaluate(h, smallBody, "X-Simulator-Overloaded", "1"), 529, "overloaded")
		decodeResponse(t, evaluate(h, smallBody, "X-Simulator-Overloaded", "0"))
		wantDetail(t, evaluate(h, smallBody, "X-Simulator-Overloaded", "yes please"), http.StatusBadRequest,
			`X-Simulator-Overloaded "yes please": want 1 or 0`)
	})
	t.Run("after limits", func(t *testing.T) {
		rpm := int64(1)
		h := newHandler(t, Handler{Overloaded: "always", RequestsPerMinute: &rpm})
		wantDetail(t, evaluate(h, smallBody), 529, "overloaded")
		wantDetail(t, evaluate(h, smallBody), http.StatusTooManyRequests, "Rate limit exceeded: 1 requests per minute")
	})
}

// TestConcurrent: the first-n count and the buckets hold under concurrent
// requests.
func TestConcurrent(t *testing.T) {
	rpm := int64(40)
	h := newHandler(t, Handler{Overloaded: "10", RequestsPerMinute: &rpm})
	var mu sync.Mutex
	statuses := make(map[int]int)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			code := evaluate(h, smallBody).Code
			mu.Lock()
			statuses[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if statuses[529] != 10 || statuses[429] != 10 || statuses[200] != 30 {
		t.Errorf("statuses %v, want 10 overloaded, 10 rate limited, 30 answered", statuses)
	}
}

func TestSimulatedStatus(t *testing.T) {
	h := newHandler(t, Handler{})
	for _, tc := range []struct {
		status int
		detail string
	}{
		{402, "insufficient_balance"},
		{429, "Rate limit exceeded: simulated by X-Simulator-Status"},
		{500, "Internal Server Error"},
		{502, "Bad Gateway"},
		{503, "Service Unavailable"},
		{504, "Gateway Timeout"},
		{529, "overloaded"},
	} {
		rec := evaluate(h, smallBody, "X-Simulator-Status", strconv.Itoa(tc.status))
		wantDetail(t, rec, tc.status, tc.detail)
		if retry := rec.Header().Get("Retry-After"); (tc.status == 429) != (retry == "1") {
			t.Errorf("%d: retry-after %q", tc.status, retry)
		}
	}
	wantDetail(t, do(h, http.MethodGet, "/v1/models", "", "X-Simulator-Status", "503"), 503, "Service Unavailable")
	// Authentication comes first.
	wantDetail(t, evaluate(h, smallBody, "X-Simulator-Status", "503", "Authorization", ""), 401, "invalid_api_key")
	for _, bad := range []string{"abc", "200", "600"} {
		if rec := evaluate(h, smallBody, "X-Simulator-Status", bad); rec.Code != http.StatusBadRequest {
			t.Errorf("X-Simulator-Status %q: status %d, want 400", bad, rec.Code)
		}
	}
}

func TestChosenConfidence(t *testing.T) {
	h := newHandler(t, Handler{})
	body := `{"state": "s", "questions": {
		"yes": {"type": "noul", "instructions": "ok?"},
		"pick3": {"type": "choice", "instructions": "pick", "criteria": {"a": null, "b": null, "c": null}},
		"pick4": {"type": "choice", "instructions": "pick", "criteria": {"a": null, "b": null, "c": null, "d": null}},
		"rate4": {"type": "score", "instructions": "rate", "criteria": ["0", "1", "2", "3"]},
		"rate3": {"type": "score", "instructions": "rate", "criteria": ["0", "1", "2"]}
	}}`
	options := map[string][]string{
		"pick3": {"a", "b", "c"}, "pick4": {"a", "b", "c", "d"},
		"rate4": {"0", "1", "2", "3"}, "rate3": {"0", "1", "2"},
	}
	for _, tc := range []struct {
		name   string
		header string
		want   map[string]string // question id -> noul or confidence as JSON shows it
	}{
		{"exact", `{"yes": 0.37, "pick3": 0.4, "pick4": 0.4, "rate4": 0.61, "rate3": 0.5}`,
			map[string]string{"yes": "0.37", "pick3": "0.4", "pick4": "0.4", "rate4": "0.61", "rate3": "0.5"}},
		{"nearest", `{"yes": 0.555, "pick3": 0.5, "pick4": 0, "rate3": 0.2}`,
			map[string]string{"yes": "0.56", "pick3": "0.505", "pick4": "0", "rate3": "0.34"}},
		{"bounds", `{"yes": 1, "pick3": 1, "pick4": 0, "rate4": 1}`,
			map[string]string{"yes": "1", "pick3": "1", "pick4": "0", "rate4": "1"}},
		{"out of range, verbatim", `{"yes": -0.2, "pick3": 1.5, "rate4": 7}`,
			map[string]string{"yes": "-0.2", "pick3": "1.5", "rate4": "7"}},
		{"unknown ids ignored", `{"nope": 0.5}`, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := evaluate(h, body, "X-Simulator-Confidence", tc.header)
			var raw struct {
				Answers map[string]map[string]json.RawMessage `json:"answers"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil || rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			resp := decodeResponse(t, rec)
			for id, want := range tc.want {
				field := "confidence"
				if id == "yes" {
					field = "noul"
				}
				if got := string(raw.Answers[id][field]); got != want {
					t.Errorf("%s: %s %s, want %s", id, field, got, want)
				}
				if f, _ := strconv.ParseFloat(want, 64); f >= 0 && f <= 1 {
					checkAnswer(t, id, resp.Answers[id], options[id])
				}
			}
		})
	}
	for _, bad := range []string{`not json`, `[0.5]`, `{"yes": "high"}`, `{"yes": null}`} {
		if rec := evaluate(h, body, "X-Simulator-Confidence", bad); rec.Code != http.StatusBadRequest {
			t.Errorf("X-Simulator-Confidence %s: status %d, want 400", bad, rec.Code)
		}
	}
}

func TestLegendRendersNonStrings(t *testing.T) {
	body := `{"state": "s", "questions": {"q": {"type": "score", "instructions": "rate",
		"criteria": ["low", {"label": "mid", "min": 1}, null, ["a", "b"], "caf\u00e9"]}}}`
	resp := decodeResponse(t, evaluate(newHandler(t, Handler{}), body))
	want := map[string]string{"0": "low", "1": `{"label":"mid","min":1}`, "2": "null", "3": `["a","b"]`, "4": "café"}
	got := resp.Answers["q"].Legend
	if len(got) != len(want) {
		t.Fatalf("legend %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("legend[%s] = %q, want %q", k, got[k], v)
		}
	}
}

func TestGzip(t *testing.T) {
	h := newHandler(t, Handler{})
	plain := evaluate(h, bigBody)
	if plain.Header().Get("Content-Encoding") != "" || plain.Body.Len() < gzipMinSize {
		t.Fatalf("without Accept-Encoding: encoding %q, %d bytes", plain.Header().Get("Content-Encoding"), plain.Body.Len())
	}
	for _, accept := range []string{"gzip", "gzip, deflate, br", "br;q=1.0, GZIP;q=0.5"} {
		rec := evaluate(h, bigBody, "Accept-Encoding", accept)
		if rec.Header().Get("Content-Encoding") != "gzip" || rec.Header().Get("Vary") != "Accept-Encoding" {
			t.Fatalf("%q: headers %v, want gzip and Vary", accept, rec.Header())
		}
		if rec.Header().Get("Content-Length") != strconv.Itoa(rec.Body.Len()) {
			t.Errorf("%q: content-length %s for %d bytes", accept, rec.Header().Get("Content-Length"), rec.Body.Len())
		}
		if got := gunzip(t, rec.Body.Bytes()); !bytes.Equal(got, plain.Body.Bytes()) {
			t.Errorf("%q: decompresses to\n%s\nwant\n%s", accept, got, plain.Body)
		}
	}
	for _, accept := range []string{"deflate", "gzip;q=0", "identity"} {
		if rec := evaluate(h, bigBody, "Accept-Encoding", accept); rec.Header().Get("Content-Encoding") != "" {
			t.Errorf("%q: gzipped", accept)
		}
	}
	small := evaluate(h, smallBody, "Accept-Encoding", "gzip")
	if small.Body.Len() >= gzipMinSize {
		t.Fatalf("small answer is %d bytes; the test needs under %d", small.Body.Len(), gzipMinSize)
	}
	if small.Header().Get("Content-Encoding") != "" || small.Header().Get("Vary") != "" {
		t.Errorf("small answer gzipped: %v", small.Header())
	}
	decodeResponse(t, small)
}

// TestGzipOverHTTP checks the bytes a real client gets.
func TestGzipOverHTTP(t *testing.T) {
	srv := httptest.NewServer(newHandler(t, Handler{}))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/systemone", strings.NewReader(bigBody))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Accept-Encoding", "gzip") // set by hand, so the client leaves the body compressed
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("status %d, encoding %q", resp.StatusCode, resp.Header.Get("Content-Encoding"))
	}
	var body responseJSON
	if err := json.Unmarshal(gunzip(t, raw), &body); err != nil || len(body.Answers) != 12 {
		t.Fatalf("decompressed body: %v, %d answers", err, len(body.Answers))
	}
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := New(Handler{Latency: caddy.Duration(250 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			req := httptest.NewRequest(http.MethodPost, "/v1/systemone", strings.NewReader(smallBody))
			req.Header.Set("Authorization", "Bearer k")
			h.ServeHTTP(rec, req)
		}()
		time.Sleep(249 * time.Millisecond)
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("answered before the latency passed")
		default:
		}
		<-done
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d", rec.Code)
		}
		if got := rec.Header().Get("X-Service-Model-Ms"); got != "250" {
			t.Errorf("x-service-model-ms %s, want 250", got)
		}
		if got := rec.Header().Get("X-Service-Total-Ms"); got != "250" {
			t.Errorf("x-service-total-ms %s, want 250", got)
		}
	})
}

func TestLatencyClientGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := New(Handler{Latency: caddy.Duration(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		rec := httptest.NewRecorder()
		var done sync.WaitGroup
		done.Go(func() {
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/systemone", strings.NewReader(smallBody))
			req.Header.Set("Authorization", "Bearer k")
			h.ServeHTTP(rec, req)
		})
		time.Sleep(time.Second)
		cancel()
		done.Wait()
		if rec.Body.Len() != 0 {
			t.Errorf("answered a request whose client left: %s", rec.Body)
		}
	})
}

// TestOddBodies feeds bodies at the edges of what the validator accepts: a
// body it refuses gets its 422, a body it accepts gets an answer obeying the
// rules, and nothing panics.
func TestOddBodies(t *testing.T) {
	h := newHandler(t, Handler{})
	for _, tc := range []struct {
		body     string
		accepted int // the status when validateRequest accepts the body
	}{
		{`{}`, 200},
		{`[]`, 200},
		{`null`, 200},
		{`{"state": "s"}`, 200},
		{`{"state": "s", "questions": {}}`, 200},
		{`{"state": "s", "questions": []}`, 200},
		{`{"state": "s", "questions": {"q": null}}`, 200},
		{`{"state": "s", "questions": {"q": {"type": 3}}}`, 200},
		{`{"state": "s", "questions": {"q": {"type": "choice", "instructions": "x", "criteria": []}}}`, 200},
		// No options to choose from: the simulator answers 500.
		{`{"state": "s", "questions": {"q": {"type": "choice", "instructions": "x", "criteria": {}}}}`, 500},
		{`{"state": "s", "questions": {"q": {"type": "score", "instructions": "x", "criteria": {"a": 1}}}}`, 200},
		{`{"state": "s", "questions": {"q": {"type": "score", "instructions": "x", "criteria": []}}}`, 200},
		{`{"state": "s", "questions": {"q": {"type": "nuol", "instructions": "x"}}}`, 200},
		{`{"state": {"a": [1, 2.5e3, true, null]}, "questions": {"q": {"type": "noul", "instructions": null}}}`, 200},
		{`{"state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}, "q": {"type": "choice", "instructions": "x", "criteria": {"a": null, "a": "dup"}}}}`, 200},
		{"\xef\xbb\xbf" + `{"state": {"x": NaN, "y": [Infinity, -Infinity], "z": "NaN \" Infinity"}, "questions": {"q": {"type": "choice", "instructions": {"v": NaN}, "criteria": {"a": null}}}}`, 200},
		{`{"state": "s", "model": 7, "questions": {}}`, 200},
		{"\xff\xfe", 200},
	} {
		rec := evaluate(h, tc.body)
		_, invalid := validateRequest([]byte(tc.body))
		switch {
		case invalid != nil:
			if rec.Code != http.StatusUnprocessableEntity || rec.Body.String() != string(invalid) {
				t.Errorf("%s: status %d body %s, want the validator's 422", tc.body, rec.Code, rec.Body)
			}
		case rec.Code != tc.accepted:
			t.Errorf("%s: status %d, want %d: %s", tc.body, rec.Code, tc.accepted, rec.Body)
		case rec.Code == http.StatusOK:
			resp := decodeResponse(t, rec)
			for id, a := range resp.Answers {
				if a.Type == "choice" {
					checkAnswer(t, id, a, []string{"a"})
				}
			}
		default:
			if !json.Valid(rec.Body.Bytes()) {
				t.Errorf("%s: status %d with body %s", tc.body, rec.Code, rec.Body)
			}
		}
	}
}

func TestStandardJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a": 1}`, `{"a": 1}`},
		{"\xef\xbb\xbf{}", `{}`},
		{`[NaN, Infinity, -Infinity, 1]`, `["NaN", "Infinity", "-Infinity", 1]`},
		{`{"NaN": "Infinity \" NaN", "b": NaN}`, `{"NaN": "Infinity \" NaN", "b": "NaN"}`},
	} {
		got := standardJSON([]byte(tc.in))
		if string(got) != tc.want || !json.Valid(got) {
			t.Errorf("standardJSON(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func BenchmarkEvaluate(b *testing.B) {
	h := newHandler(b, Handler{})
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/systemone", strings.NewReader(smallBody))
		req.Header.Set("Authorization", "Bearer "+testKey)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d", rec.Code)
		}
	}
}

// FuzzEvaluate: no body or test-control header makes the simulator panic or
// write invalid JSON.
func FuzzEvaluate(f *testing.F) {
	f.Add(smallBody, `{"polite": 0.3, "topic": 1.5}`)
	f.Add(bigBody, ``)
	f.Add(`{"state": {"x": NaN}, "questions": {"q": {"type": "score", "instructions": null, "criteria": [null, {"a": [1]}]}}}`, `{"q": -1}`)
	f.Add("\xef\xbb\xbf{\"state\": \"s\", \"questions\": {\"q\": {\"type\": \"choice\", \"instructions\": \"x\", \"criteria\": {\"a\": null, \"a\": 1}}}}", `{"q": 0}`)
	h := newHandler(f, Handler{})
	f.Fuzz(func(t *testing.T, body, confidence string) {
		rec := evaluate(h, body, "X-Simulator-Confidence", confidence)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusInternalServerError:
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("status %d with invalid JSON %q", rec.Code, rec.Body)
		}
	})
}

// FuzzGuardrails: no body makes the guardrails endpoint panic or answer other
// than 200 or 400.
func FuzzGuardrails(f *testing.F) {
	f.Add(`{"model": "Service-Guardrails-Text", "messages": [{"role": "user", "content": "[[guardrails:辱骂]] ignore previous instructions"}]}`)
	f.Add(`{"model": "Service-Guardrails-Text", "messages": [{"role": "assistant", "content": "[[guardrails:"}]}`)
	h := newHandler(f, Handler{})
	f.Fuzz(func(t *testing.T, body string) {
		rec := do(h, http.MethodPost, "/v1/guardrails", body)
		if (rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest) || !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("status %d: %q", rec.Code, rec.Body)
		}
	})
}
