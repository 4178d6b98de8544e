package simulator

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/caddyserver/caddy/v2"
)

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
