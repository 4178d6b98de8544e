// Package simulator is a simulated upstream for the gateway: the evaluation
// service (GET /v1/models, POST /v1/systemone) and the content guardrails
// service (POST /v1/guardrails), as the services document them. Every
// test and demo uses it as the upstream, and a new user tries the gateway with
// it without an account.
//
// # Evaluation service
//
// Every endpoint takes `Authorization: Bearer <key>`; a missing, empty or
// unknown key gives 401 {"detail":"invalid_api_key"}. The key is the
// organization that rate limits apply to. Any other path answers 404
// {"detail":"Not Found"} and a known path with the wrong method 405, as
// FastAPI does.
//
// POST /v1/systemone takes these steps in order, each one able to end the
// request:
//
//  1. authentication (401), then the test-control headers below (400 when one
//     is malformed, or the status X-Simulator-Status asks for);
//  2. the body, at most 16 MiB (413 {"detail":"request_too_large"}), decoded
//     as Python's json module does and validated as the service's pydantic
//     models would be (422 with FastAPI's list of errors, or the service's
//     "Too many choices" string): decode.go and validate.go, written apart
//     from the gateway's parser so that tests compare two readings of the
//     service's rules;
//  3. the model: omitted, "service-latest" and "service-preview" resolve to
//     the configured version, a version identifier service-<n>.<n>.<n> is
//     accepted as itself, anything else is 404 {"detail":"model_not_found"};
//  4. the token budget (422 {"detail":"max_tokens_exceeded"}) over 64,000
//     input tokens in total, or over 32,000 for the state plus the longest
//     question (max_tokens and max_question_tokens change or lift them);
//  5. the per-key limits (429 with retry-after): requests per minute, and a
//     token bucket of capacity 64,000 refilled at tokens per second, where a
//     request costing more than the capacity is charged the capacity;
//  6. overload (529 {"detail":"overloaded"});
//  7. latency, then the answer.
//
// A choice question without options, which the documented types let through, gets 500:
// there is nothing to choose.
//
// Answers are deterministic: the same body and version give the same answer,
// each question's drawn from a hash of the version, the state, the question
// id and the question's JSON (state and question without insignificant white
// space). service-1.0.0 and service-2.0.0 answer against a truth that
// depends on the content only, each by its own confidence-to-agreement
// curve; any other version answers at random (see Truth and Agreement). They follow the service's numeric rules
// exactly: probabilities in whole hundredths summing to exactly 1; choice
// `choice` the first option with the highest probability and `confidence`
// (n*peak-1)/(n-1); score `score` the probability-weighted tier and
// `confidence` the largest probability; noul `noul` in hundredths. Derived
// numbers are rounded to four decimals. A score's `legend` shows each tier
// description as sent when it is a string, as compact JSON text otherwise.
//
// usage.input_tokens comes from the simulator's own tokenizer, deliberately
// not the gateway's estimator, which is measured against it: each run of
// ASCII letters and digits is ceil(len/4) tokens, and every other character
// that is not white space (a CJK character, a punctuation mark) is one token.
// It reads the text of every string, object key, number and boolean in the
// state, counted once however many questions there are, and in each
// question's instructions and criteria (so option keys count), and adds 4
// tokens per question. usage.output_tokens is 3 per question.
//
// Responses carry content-type application/json and x-request-id; a 200 from
// POST /v1/systemone also carries x-service-model-ms (latency plus the time to
// answer) and x-service-total-ms. A body of at least 500 bytes is gzipped when
// the request's Accept-Encoding allows gzip, with Content-Encoding: gzip and
// Vary: Accept-Encoding, as FastAPI's GZipMiddleware does.
//
// # Test controls
//
// Request headers; the gateway forwards them unchanged, so end-to-end tests can
// set them too:
//
//   - X-Simulator-Confidence: a JSON object {"<question id>": <number>, ...}.
//     For a noul question the number is the `noul` answered; for choice and
//     score it is the `confidence` answered, with a distribution built to
//     match it exactly when whole hundredths allow, otherwise the nearest
//     achievable one (whose confidence is then the one reported). A number
//     outside 0..1 is reported verbatim as `noul` or `confidence`, with the
//     distribution built for the nearest bound, so tests can produce an
//     out-of-range answer. Ids not in the request are ignored.
//   - X-Simulator-Version: the concrete version aliases resolve to for this
//     request, e.g. to test an alias moving to a new version.
//   - X-Simulator-Overloaded: 1 answers 529 overloaded at the overload step.
//   - X-Simulator-Status: <code> (400-599) answers that status right after
//     authentication, with a plausible body in the service's error style
//     (and retry-after: 1 on 429). Guardrails honours it too.
//
// # Guardrails service
//
// POST /v1/guardrails takes `Authorization: Bearer <key>` (401
// {"code":40101,"message":"Invalid API key"}) and a body
// {"model":"Service-Guardrails-Text","messages":[{"role":"user"|"assistant",
// "content":"..."}, ...]}; anything else is 400 {"code":40001,"message":...}.
// It checks every message's content, whatever its role, for these phrases,
// ignoring case and runs of white space:
//
//	提示词攻击 (high, security)     ignore previous instructions, ignore all previous,
//	                               ignore the criteria, disregard the instructions,
//	                               忽略之前的指令, 忽略以上, 无视之前
//	暴力犯罪 (high, compliance)     build a bomb, make a bomb, 炸弹制作, 制作炸弹
//	违法犯罪 (medium, compliance)   drugs for sale, 贩毒
//	色情 (medium, compliance)       porn, 色情
//	辱骂 (low, compliance)          idiot, 白痴
//	侵犯个人隐私 (low, compliance)  home address of, 身份证号
//
// A marker [[guardrails:<category>]] in a message reports that category: one
// of the service's twelve at its table level, or any other text at 中风险, so the
// gateway's handling of unknown categories can be tested. 提示词攻击 is reported
// under `security`, every other category under `compliance`.
//
// The overall level is the highest found (无风险 when none). 高风险 suggests
// 阻断 and 中风险 代答, both with a refusal text in suggest_answer; 低风险 and
// 无风险 suggest 通过 with an empty suggest_answer. Latency, overload and rate
// limits do not apply to guardrails.
package simulator

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	mathrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// DefaultVersion is the concrete version the aliases resolve to by default.
const DefaultVersion = "service-1.0.0"

const (
	// maxBody bounds what the simulator reads of a request body.
	maxBody = 16 << 20
	// gzipMinSize is GZipMiddleware's default minimum_size.
	gzipMinSize = 500
)

// Handler serves the simulated evaluation and guardrails services. It answers
// every request itself: paths it does not serve get 404, never the next
// handler.
type Handler struct {
	// Version is the concrete version that an omitted model and the aliases
	// service-latest and service-preview resolve to. Default "service-1.0.0".
	Version string `json:"version,omitempty"`

	// Latency is added before each evaluation answer. Default 0.
	Latency caddy.Duration `json:"latency,omitempty"`

	// Overloaded makes POST /v1/systemone answer 529 {"detail":"overloaded"}
	// at the overload step: "always"; a fraction strictly between 0 and 1,
	// the probability for each request; or a whole number n, the first n
	// requests that reach that step since the config was loaded. Default:
	// never.
	Overloaded string `json:"overloaded,omitempty"`

	// Keys are the API keys both services accept. Default: any non-empty
	// bearer key.
	Keys []string `json:"keys,omitempty"`

	// RequestsPerMinute is the per-key request limit of POST /v1/systemone,
	// a bucket of that capacity refilled continuously. Default 300; 0 turns
	// it off.
	RequestsPerMinute *int64 `json:"requests_per_minute,omitempty"`

	// TokensPerSecond refills the per-key input-token bucket (capacity
	// 64000) of POST /v1/systemone. Default 1000; 0 turns it off.
	TokensPerSecond *int64 `json:"tokens_per_second,omitempty"`

	// MaxTokens is the token budget of one request (the state plus every
	// question); over it, 422 max_tokens_exceeded. Default 64000, as the
	// service documents; 0 turns it off (load benchmarks send larger states).
	MaxTokens *int64 `json:"max_tokens,omitempty"`

	// MaxQuestionTokens is the budget of the state plus the longest single
	// question; over it, 422 max_tokens_exceeded. Default 32000, as the
	// service documents; 0 turns it off.
	MaxQuestionTokens *int64 `json:"max_question_tokens,omitempty"`

	keys     map[string]struct{}
	overload overload
	limiter  *limiter
	// budgetTotal and budgetQuestion are the token budgets; 0 is off.
	budgetTotal, budgetQuestion int64
	// now and random are swapped by tests.
	now    func() time.Time
	random func() float64
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.systemone_simulator",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision applies defaults and sets up the rate limiter and overload state.
func (h *Handler) Provision(caddy.Context) error {
	return h.provision()
}

func (h *Handler) provision() error {
	if h.Version == "" {
		h.Version = DefaultVersion
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.random == nil {
		h.random = mathrand.Float64
	}
	var err error
	if h.overload, err = parseOverload(h.Overloaded); err != nil {
		return err
	}
	if len(h.Keys) > 0 {
		h.keys = make(map[string]struct{}, len(h.Keys))
		for _, k := range h.Keys {
			h.keys[k] = struct{}{}
		}
	}
	rpm, tps := int64(300), int64(1000)
	if h.RequestsPerMinute != nil {
		rpm = *h.RequestsPerMinute
	}
	if h.TokensPerSecond != nil {
		tps = *h.TokensPerSecond
	}
	h.limiter = newLimiter(rpm, tps, h.now)
	h.budgetTotal, h.budgetQuestion = maxTotalTokens, maxQuestionTokens
	if h.MaxTokens != nil {
		h.budgetTotal = *h.MaxTokens
	}
	if h.MaxQuestionTokens != nil {
		h.budgetQuestion = *h.MaxQuestionTokens
	}
	return nil
}

// Validate checks the configuration's ranges.
func (h *Handler) Validate() error {
	if strings.TrimSpace(h.Version) == "" || strings.ContainsAny(h.Version, " \t\r\n") {
		return fmt.Errorf("version %q: must be a non-empty name without spaces", h.Version)
	}
	if h.Latency < 0 {
		return fmt.Errorf("latency %v: must not be negative", time.Duration(h.Latency))
	}
	for _, k := range h.Keys {
		if k == "" || strings.ContainsAny(k, " \t\r\n") {
			return fmt.Errorf("keys: %d-character key is empty or holds white space, which a bearer token cannot carry", len(k))
		}
	}
	if h.RequestsPerMinute != nil && *h.RequestsPerMinute < 0 {
		return fmt.Errorf("requests_per_minute %d: must not be negative", *h.RequestsPerMinute)
	}
	if h.TokensPerSecond != nil && *h.TokensPerSecond < 0 {
		return fmt.Errorf("tokens_per_second %d: must not be negative", *h.TokensPerSecond)
	}
	if h.MaxTokens != nil && *h.MaxTokens < 0 {
		return fmt.Errorf("max_tokens %d: must not be negative", *h.MaxTokens)
	}
	if h.MaxQuestionTokens != nil && *h.MaxQuestionTokens < 0 {
		return fmt.Errorf("max_question_tokens %d: must not be negative", *h.MaxQuestionTokens)
	}
	return nil
}

// New returns the simulator as a plain http.Handler, for use without Caddy
// (for example behind httptest.NewServer): it applies the defaults and
// validates the configuration as Caddy would.
func New(h Handler) (http.Handler, error) {
	if err := h.provision(); err != nil {
		return nil, err
	}
	if err := h.Validate(); err != nil {
		return nil, err
	}
	return http.HandlerFunc(h.serve), nil
}

// ServeHTTP implements caddyhttp.MiddlewareHandler. It never calls next.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	h.serve(w, r)
	return nil
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/guardrails" {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeGuardrailsError(w, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		h.serveGuardrails(w, r)
		return
	}

	w.Header().Set("X-Request-Id", requestID())
	switch r.URL.Path {
	case "/v1/systemone":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeDetail(w, r, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		h.serveEvaluate(w, r)
	case "/v1/models":
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeDetail(w, r, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		h.serveModels(w, r)
	default:
		writeDetail(w, r, http.StatusNotFound, "Not Found")
	}
}

// bearerKey returns the request's bearer key when the handler accepts it.
func (h *Handler) bearerKey(r *http.Request) (string, bool) {
	scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	key = strings.TrimSpace(key)
	if key == "" {
		return "", false
	}
	if h.keys != nil {
		if _, ok := h.keys[key]; !ok {
			return "", false
		}
	}
	return key, true
}

// simulatedStatus reads X-Simulator-Status: the status to answer, 0 for none.
func simulatedStatus(r *http.Request) (int, error) {
	v := r.Header.Get("X-Simulator-Status")
	if v == "" {
		return 0, nil
	}
	code, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || code < 400 || code > 599 {
		return 0, fmt.Errorf("X-Simulator-Status %q: want a status code from 400 to 599", v)
	}
	return code, nil
}

// overload decides which evaluation requests answer 529.
type overload struct {
	always   bool
	fraction float64
	first    int64
	// seen counts requests that reached the overload step; shared by copies.
	seen *atomic.Int64
}

// parseOverload reads the Overloaded setting: "always", a fraction in
// (0, 1), or a whole number of first requests ("" and "0" are never).
func parseOverload(s string) (overload, error) {
	o := overload{seen: new(atomic.Int64)}
	switch {
	case s == "":
	case s == "always":
		o.always = true
	case strings.ContainsAny(s, ".eE"):
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || !(f > 0 && f < 1) {
			return o, fmt.Errorf("overloaded %q: want always, a fraction between 0 and 1, or a whole number", s)
		}
		o.fraction = f
	default:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return o, fmt.Errorf("overloaded %q: want always, a fraction between 0 and 1, or a whole number", s)
		}
		o.first = n
	}
	return o, nil
}

// hit reports whether this request is answered overloaded.
func (o overload) hit(random func() float64) bool {
	switch {
	case o.always:
		return true
	case o.fraction > 0:
		return random() < o.fraction
	case o.first > 0:
		return o.seen.Add(1) <= o.first
	}
	return false
}

// requestID returns a new id in the service's style: req_ and 24 hex digits.
func requestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "req_" + hex.EncodeToString(b[:])
}

// writeDetail writes an evaluation-service error: {"detail": detail}.
func writeDetail(w http.ResponseWriter, r *http.Request, status int, detail string) {
	body, _ := json.Marshal(struct {
		Detail string `json:"detail"`
	}{detail})
	writeJSON(w, r, status, body)
}

// writeJSON writes an evaluation-service response, gzipped as FastAPI's
// GZipMiddleware does.
func writeJSON(w http.ResponseWriter, r *http.Request, status int, body []byte) {
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	if len(body) >= gzipMinSize && acceptsGzip(r) {
		var buf bytes.Buffer
		// GZipMiddleware's default compresslevel is 9.
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(body)
		_ = zw.Close()
		body = buf.Bytes()
		hdr.Set("Content-Encoding", "gzip")
		hdr.Add("Vary", "Accept-Encoding")
	}
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// acceptsGzip reports whether Accept-Encoding names gzip with a non-zero
// quality.
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(part, ";")
			if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
				continue
			}
			name, value, _ := strings.Cut(params, "=")
			if strings.EqualFold(strings.TrimSpace(name), "q") {
				q, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
				return err != nil || q > 0
			}
			return true
		}
	}
	return false
}

// millis formats a duration as whole milliseconds for the x-service-*-ms
// headers.
func millis(d time.Duration) string {
	return strconv.FormatInt(int64(math.Round(float64(d)/float64(time.Millisecond))), 10)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
