package simulator

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

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
