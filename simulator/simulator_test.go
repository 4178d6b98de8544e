package simulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

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
