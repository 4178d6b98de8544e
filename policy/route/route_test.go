package route

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/evaluation"
)

func ptr(v float64) *float64 { return &v }

// testConfig pins service-1.0.0 with a threshold for every type and two
// per-question overrides, and service-0.9.0 with a choice threshold only.
func testConfig() Config {
	return Config{Pins: []Pin{
		{
			Version: "service-1.0.0",
			Noul:    ptr(0.7), Choice: ptr(0.5), Score: ptr(0.6),
			Questions: map[string]float64{"strict": 0.9, "lenient": 0.1},
		},
		{Version: "service-0.9.0", Choice: ptr(0.5)},
	}}
}

func newRouter(t testing.TB, cfg Config) *Router {
	t.Helper()
	r, err := New(cfg, nil, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func q(id, typ string) evaluation.Question { return evaluation.Question{ID: id, Type: typ} }

var mixed = []evaluation.Question{q("yes", "noul"), q("pick", "choice"), q("rate", "score")}

// body builds a 200 response: answers maps a question id to its answer object.
func body(model string, answers ...string) []byte {
	return []byte(`{"model":"` + model + `","answers":{` + strings.Join(answers, ",") +
		`},"usage":{"input_tokens":120,"output_tokens":3}}`)
}

func noul(id, p string) string { return `"` + id + `":{"type":"noul","noul":` + p + `}` }

func choice(id, conf string) string {
	return `"` + id + `":{"type":"choice","choice":"good","probabilities":{"good":0.8,"bad":0.2},"confidence":` + conf + `}`
}

func score(id, conf string) string {
	return `"` + id + `":{"type":"score","score":1.81,"legend":{"0":"a","1":"b","2":"c","3":"d"},` +
		`"probabilities":{"0":0.04,"1":0.23,"2":0.61,"3":0.12},"confidence":` + conf + `}`
}

// decideBody reads body as the handler does, with evaluation.ParseResponse,
// and decides on it: a body the parser rejects is a nil response.
func decideBody(r *Router, questions []evaluation.Question, body []byte, signal Signal) Decision {
	resp, err := evaluation.ParseResponse(body)
	if err != nil {
		resp = nil
	}
	return r.Decide(questions, resp, signal)
}

func routes(d Decision) string {
	var b strings.Builder
	for i, q := range d.Questions {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(q.ID + "=" + q.Route)
	}
	return b.String()
}

func TestDecide(t *testing.T) {
	r := newRouter(t, testConfig())
	auto := newRouter(t, Config{Pins: testConfig().Pins, Unpinned: "auto"})
	confident := body("service-1.0.0", noul("yes", "0.95"), choice("pick", "0.8"), score("rate", "0.61"))
	tests := []struct {
		name      string
		router    *Router
		questions []evaluation.Question
		body      []byte
		signal    Signal
		route     string
		reason    string
		model     string
		min       float64 // -1: unknown
		routes    string
	}{
		{
			name: "confident", questions: mixed, body: confident,
			route: "auto", reason: "confident", model: "service-1.0.0", min: 0.61,
			routes: "yes=auto pick=auto rate=auto",
		},
		{
			name: "low confidence", questions: mixed,
			body:  body("service-1.0.0", noul("yes", "0.95"), choice("pick", "0.49"), score("rate", "0.61")),
			route: "human", reason: "low_confidence", model: "service-1.0.0", min: 0.49,
			routes: "yes=auto pick=human rate=auto",
		},
		{
			name: "threshold exactly at the confidence", questions: mixed,
			body:  body("service-1.0.0", noul("yes", "0.15"), choice("pick", "0.5"), score("rate", "0.6")),
			route: "auto", reason: "confident", model: "service-1.0.0", min: 0.5,
			routes: "yes=auto pick=auto rate=auto",
		},
		{
			name: "no threshold for a type", questions: mixed,
			body:  body("service-0.9.0", noul("yes", "1"), choice("pick", "0.9"), score("rate", "0.9")),
			route: "human", reason: "no_threshold", model: "service-0.9.0", min: 0.9,
			routes: "yes=human pick=auto rate=human",
		},
		{
			name: "no threshold outranks low confidence", questions: mixed,
			body:  body("service-0.9.0", noul("yes", "1"), choice("pick", "0.1"), score("rate", "0.9")),
			route: "human", reason: "no_threshold", model: "service-0.9.0", min: 0.1,
			routes: "yes=human pick=human rate=human",
		},
		{
			name: "unpinned version, unpinned human", questions: mixed,
			body:  body("service-2.0.0", noul("yes", "0.95"), choice("pick", "0.8"), score("rate", "0.61")),
			route: "human", reason: "unpinned_version", model: "service-2.0.0", min: 0.61,
			routes: "yes=human pick=human rate=human",
		},
		{
			name: "unpinned version, unpinned auto", router: auto, questions: mixed,
			body:  body("service-2.0.0", noul("yes", "0.5"), choice("pick", "0.1"), score("rate", "0.61")),
			route: "auto", reason: "unpinned_version", model: "service-2.0.0", min: 0,
			routes: "yes=auto pick=auto rate=auto",
		},
		{
			name: "unpinned auto yields to guardrails review", router: auto, questions: mixed,
			body:   body("service-2.0.0", noul("yes", "0.5"), choice("pick", "0.1"), score("rate", "0.61")),
			signal: Signal{GuardrailsReview: true},
			route:  "human", reason: "guardrails_review", model: "service-2.0.0", min: 0,
			routes: "yes=auto pick=auto rate=auto",
		},
		{
			name: "unpinned auto yields to an unreadable body", router: auto, questions: mixed,
			body:  body("service-2.0.0", noul("yes", "0.5"), choice("pick", "1.5"), score("rate", "0.61")),
			route: "human", reason: "unreadable_response", model: "service-2.0.0", min: -1,
			routes: "yes=auto pick=human rate=auto",
		},
		{
			name: "guardrails review", questions: mixed, body: confident,
			signal: Signal{GuardrailsReview: true},
			route:  "human", reason: "guardrails_review", model: "service-1.0.0", min: 0.61,
			routes: "yes=auto pick=auto rate=auto",
		},
		{
			name: "guardrails review outranks no threshold and low confidence", questions: mixed,
			body:   body("service-0.9.0", noul("yes", "1"), choice("pick", "0.1"), score("rate", "0.9")),
			signal: Signal{GuardrailsReview: true},
			route:  "human", reason: "guardrails_review", model: "service-0.9.0", min: 0.1,
			routes: "yes=human pick=human rate=human",
		},
		{
			name: "guardrails unavailable outranks review", questions: mixed, body: confident,
			signal: Signal{GuardrailsReview: true, GuardrailsUnchecked: true},
			route:  "human", reason: "guardrails_unavailable", model: "service-1.0.0", min: 0.61,
			routes: "yes=auto pick=auto rate=auto",
		},
		{
			name: "unpinned version outranks guardrails", questions: mixed,
			body:   body("service-2.0.0", noul("yes", "0.95"), choice("pick", "0.8"), score("rate", "0.61")),
			signal: Signal{GuardrailsReview: true, GuardrailsUnchecked: true},
			route:  "human", reason: "unpinned_version", model: "service-2.0.0", min: 0.61,
			routes: "yes=human pick=human rate=human",
		},
		{
			name: "unreadable outranks everything", questions: mixed,
			body:   body("service-2.0.0", noul("yes", "0.95"), choice("pick", "0.8")),
			signal: Signal{GuardrailsReview: true, GuardrailsUnchecked: true},
			route:  "human", reason: "unreadable_response", model: "service-2.0.0", min: -1,
			routes: "yes=human pick=human rate=human",
		},
		{
			name: "per-question overrides", questions: []evaluation.Question{q("strict", "choice"), q("lenient", "score"), q("pick", "choice")},
			body:  body("service-1.0.0", choice("strict", "0.89"), score("lenient", "0.1"), choice("pick", "0.89")),
			route: "human", reason: "low_confidence", model: "service-1.0.0", min: 0.1,
			routes: "strict=human lenient=auto pick=auto",
		},
		{
			name: "override met exactly", questions: []evaluation.Question{q("strict", "noul")},
			body:  body("service-1.0.0", noul("strict", "0.95")),
			route: "auto", reason: "confident", model: "service-1.0.0", min: 0.9,
			routes: "strict=auto",
		},
		{
			name: "answers in another order than the questions", questions: mixed,
			body:  body("service-1.0.0", score("rate", "0.59"), noul("yes", "0"), choice("pick", "1")),
			route: "human", reason: "low_confidence", model: "service-1.0.0", min: 0.59,
			routes: "yes=auto pick=auto rate=human",
		},
		{
			name: "extra answers are ignored", questions: []evaluation.Question{q("pick", "choice")},
			body:  body("service-1.0.0", choice("pick", "0.7"), `"other":{"type":"noul","noul":"x"}`),
			route: "auto", reason: "confident", model: "service-1.0.0", min: 0.7,
			routes: "pick=auto",
		},
		{
			name: "no questions", questions: nil, body: body("service-1.0.0"),
			route: "auto", reason: "confident", model: "service-1.0.0", min: -1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			router := tt.router
			if router == nil {
				router = r
			}
			d := decideBody(router, tt.questions, tt.body, tt.signal)
			if d.Route != tt.route || d.Reason != tt.reason || d.Model != tt.model {
				t.Errorf("route, reason, model = %s, %s, %q; want %s, %s, %q", d.Route, d.Reason, d.Model, tt.route, tt.reason, tt.model)
			}
			if tt.min < 0 && d.HasMinConfidence {
				t.Errorf("min confidence %v, want unknown", d.MinConfidence)
			}
			if tt.min >= 0 && (!d.HasMinConfidence || d.MinConfidence != tt.min) {
				t.Errorf("min confidence %v (known %v), want %v", d.MinConfidence, d.HasMinConfidence, tt.min)
			}
			if got := routes(d); got != tt.routes {
				t.Errorf("routes %q, want %q", got, tt.routes)
			}
		})
	}
}

// reasons lists each question's reason, as routes lists their routes.
func reasons(d Decision) string {
	parts := make([]string, len(d.Questions))
	for i, q := range d.Questions {
		parts[i] = q.ID + "=" + q.Reason
	}
	return strings.Join(parts, " ")
}

// Each question carries the reason for its own route: why it is auto, or
// the first cause that routes it human, by the Decision's order; the
// guardrails verdict, a cause of the request's, is the Decision's alone.
func TestDecideQuestionReasons(t *testing.T) {
	r := newRouter(t, testConfig())
	auto := newRouter(t, Config{Pins: testConfig().Pins, Unpinned: "auto"})
	orgs := newRouter(t, Config{OrgFallback: "human", Pins: []Pin{{
		Version: "service-1.0.0", Choice: ptr(0.5),
		Orgs: []OrgPin{{Org: "acme", Lines: []OrgLine{{Type: "choice", Threshold: ptr(0.5)}, {Type: "score", Human: true}}}},
	}}})
	tests := []struct {
		name    string
		router  *Router
		qs      []evaluation.Question
		body    []byte
		signal  Signal
		reasons string
	}{
		{"confident and low", r, mixed, body("service-1.0.0", noul("yes", "0.95"), choice("pick", "0.49"), score("rate", "0.61")), Signal{},
			"yes=confident pick=low_confidence rate=confident"},
		{"no threshold for a type", r, mixed, body("service-0.9.0", noul("yes", "1"), choice("pick", "0.1"), score("rate", "0.9")), Signal{},
			"yes=no_threshold pick=low_confidence rate=no_threshold"},
		{"unpinned, human", r, mixed, body("service-2.0.0", noul("yes", "1"), choice("pick", "1"), score("rate", "1")), Signal{},
			"yes=unpinned_version pick=unpinned_version rate=unpinned_version"},
		{"unpinned, auto", auto, mixed, body("service-2.0.0", noul("yes", "0.5"), choice("pick", "0.1"), score("rate", "0.61")), Signal{},
			"yes=unpinned_version pick=unpinned_version rate=unpinned_version"},
		{"one answer unread", r, mixed, body("service-1.0.0", noul("yes", "0.95"), choice("pick", "1.5"), score("rate", "0.61")), Signal{},
			"yes=confident pick=unreadable_response rate=confident"},
		{"no model", r, mixed, []byte(`{"answers":{` + noul("yes", "1") + `}}`), Signal{},
			"yes=unreadable_response pick=unreadable_response rate=unreadable_response"},
		{"unreadable body", r, mixed, []byte(`not json`), Signal{},
			"yes=unreadable_response pick=unreadable_response rate=unreadable_response"},
		{"guardrails review is the request's", r, mixed, body("service-1.0.0", noul("yes", "0.95"), choice("pick", "0.8"), score("rate", "0.61")),
			Signal{GuardrailsReview: true}, "yes=confident pick=confident rate=confident"},
		{"an org's human line and its missing line", orgs, mixed, body("service-1.0.0", noul("yes", "1"), choice("pick", "0.9"), score("rate", "0.9")),
			Signal{Org: "acme"}, "yes=org_no_threshold pick=confident rate=no_threshold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decideBody(tt.router, tt.qs, tt.body, tt.signal)
			if got := reasons(d); got != tt.reasons {
				t.Errorf("question reasons %s, want %s (routes %s)", got, tt.reasons, routes(d))
			}
			for _, q := range d.Questions {
				autoReason := q.Reason == ReasonConfident || q.Reason == ReasonUnpinnedVersion
				if q.Route == RouteAuto && !autoReason || q.Route == RouteHuman && q.Reason == ReasonConfident {
					t.Errorf("question %s routes %s for %s", q.ID, q.Route, q.Reason)
				}
			}
		})
	}
}

func TestDecideUnreadable(t *testing.T) {
	r := newRouter(t, Config{Pins: testConfig().Pins, Unpinned: "auto"})
	qs := []evaluation.Question{q("yes", "noul"), q("pick", "choice")}
	good := []string{noul("yes", "0.9"), choice("pick", "0.9")}
	tests := []struct {
		name  string
		body  []byte
		model string // the model still reported
	}{
		{"nil body (unread, over the bound)", nil, ""},
		{"empty body", []byte{}, ""},
		{"not JSON", []byte("<html>502 Bad Gateway</html>"), ""},
		{"truncated", body("service-1.0.0", good...)[:60], ""},
		{"trailing data", append(body("service-1.0.0", good...), " {}"...), ""},
		{"top level array", []byte(`[` + string(body("service-1.0.0", good...)) + `]`), ""},
		{"invalid JSON in a skipped field", []byte(`{"model":"service-1.0.0","answers":{` + strings.Join(good, ",") + `},"usage":{"input_tokens":01}}`), ""},
		{"answer missing", body("service-1.0.0", good[0]), "service-1.0.0"},
		{"answers null", []byte(`{"model":"service-1.0.0","answers":null}`), "service-1.0.0"},
		{"answers missing", []byte(`{"model":"service-1.0.0"}`), "service-1.0.0"},
		{"answer not an object", body("service-1.0.0", good[0], `"pick":0.9`), "service-1.0.0"},
		{"type differs from the question's", body("service-1.0.0", good[0], `"pick":{"type":"score","confidence":0.9}`), "service-1.0.0"},
		{"type missing", body("service-1.0.0", good[0], `"pick":{"confidence":0.9}`), "service-1.0.0"},
		{"confidence above 1", body("service-1.0.0", good[0], choice("pick", "1.01")), "service-1.0.0"},
		{"confidence below 0", body("service-1.0.0", good[0], choice("pick", "-0.01")), "service-1.0.0"},
		{"confidence a string", body("service-1.0.0", good[0], choice("pick", `"0.9"`)), "service-1.0.0"},
		{"confidence null", body("service-1.0.0", good[0], choice("pick", "null")), "service-1.0.0"},
		{"confidence overflows", body("service-1.0.0", good[0], choice("pick", "1e999")), "service-1.0.0"},
		{"confidence missing", body("service-1.0.0", good[0], `"pick":{"type":"choice","choice":"good"}`), "service-1.0.0"},
		{"noul missing", body("service-1.0.0", `"yes":{"type":"noul","confidence":0.9}`, good[1]), "service-1.0.0"},
		{"noul above 1", body("service-1.0.0", noul("yes", "1.5"), good[1]), "service-1.0.0"},
		{"noul a boolean", body("service-1.0.0", noul("yes", "true"), good[1]), "service-1.0.0"},
		{"confidence NaN", body("service-1.0.0", good[0], choice("pick", "NaN")), "service-1.0.0"},
		{"noul Infinity", body("service-1.0.0", noul("yes", "Infinity"), good[1]), "service-1.0.0"},
		{"noul -Infinity", body("service-1.0.0", noul("yes", "-Infinity"), good[1]), "service-1.0.0"},
		{"last duplicate answer wins", body("service-1.0.0", good[0], good[1], choice("pick", "7")), "service-1.0.0"},
		{"model missing", []byte(`{"answers":{` + strings.Join(good, ",") + `}}`), ""},
		{"model null", []byte(`{"model":null,"answers":{` + strings.Join(good, ",") + `}}`), ""},
		{"model empty", body("", good...), ""},
		{"model a number", []byte(`{"model":1,"answers":{` + strings.Join(good, ",") + `}}`), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decideBody(r, qs, tt.body, Signal{})
			if d.Route != RouteHuman || d.Reason != ReasonUnreadableResponse {
				t.Errorf("got %s/%s, want human/unreadable_response", d.Route, d.Reason)
			}
			if d.Model != tt.model {
				t.Errorf("model %q, want %q", d.Model, tt.model)
			}
			if d.HasMinConfidence {
				t.Errorf("min confidence %v reported for an unreadable body", d.MinConfidence)
			}
			if len(d.Questions) != len(qs) {
				t.Fatalf("%d questions, want %d", len(d.Questions), len(qs))
			}
			for i, dq := range d.Questions {
				if dq.ID != qs[i].ID || dq.Type != qs[i].Type {
					t.Errorf("question %d is %s/%s, want %s/%s", i, dq.ID, dq.Type, qs[i].ID, qs[i].Type)
				}
				// With no version known, even `unpinned auto` routes nothing auto.
				if tt.model == "" && dq.Route != RouteHuman {
					t.Errorf("question %s routed %s without a known version", dq.ID, dq.Route)
				}
			}
		})
	}

	// A body the handler could not read at all reaches Decide as nil.
	d := r.Decide(qs, nil, Signal{})
	if d.Route != RouteHuman || d.Reason != ReasonUnreadableResponse || d.Model != "" || d.HasMinConfidence || routes(d) != "yes=human pick=human" {
		t.Errorf("nil response: %s/%s model %q routes %q", d.Route, d.Reason, d.Model, routes(d))
	}

	// The answers that are readable are still reported.
	d = decideBody(r, qs, body("service-1.0.0", good[0]), Signal{})
	if yes := d.Questions[0]; !yes.HasConfidence || yes.Confidence != 0.8 || d.Questions[1].HasConfidence {
		t.Errorf("partial answers: %+v", d.Questions)
	}
}

// TestDecideReadsAnswersAsEncodingJSONDoes covers JSON forms the service may
// legally write: escapes in keys and values, whitespace, exponents, -0,
// duplicate members.
func TestDecideReadsAnswersAsEncodingJSONDoes(t *testing.T) {
	r := newRouter(t, testConfig())
	qs := []evaluation.Question{q("中文", "choice"), q(`a"b`, "noul"), q("c", "score")}
	b := []byte("{ \"usage\" : {\"x\":[1,2,{\"y\":null}]} ,\n\t\"model\" : \"service-1.0.\\u0030\" , \"answers\" : {\r\n" +
		`"\u4e2d\u6587" : {"confidence": 0.2, "type": "choice", "confidence": 5E-1},` +
		`"a\"b": {"type": "no\u0075l", "noul": -0},` +
		`"c": {"type": "score", "confidence": 6.1e-1, "legend": {"0": "\ud83d\ude00"}}` +
		"} }\n")
	d := decideBody(r, qs, b, Signal{})
	if d.Reason != ReasonConfident || d.Model != "service-1.0.0" {
		t.Fatalf("got %s/%s model %q, want confident from service-1.0.0", d.Route, d.Reason, d.Model)
	}
	for i, want := range []float64{0.5, 1, 0.61} {
		if got := d.Questions[i].Confidence; got != want || !d.Questions[i].HasConfidence {
			t.Errorf("question %q: confidence %v, want %v", qs[i].ID, got, want)
		}
	}
	if math.Signbit(d.Questions[1].Confidence) || math.Signbit(d.MinConfidence) {
		t.Error("a negative zero leaked into a confidence")
	}
}

// TestNoulConfidence checks |2p-1| near 0, 0.5 and 1, and that it is exact
// for the decimal p: in float64 arithmetic 1-2*0.45 and 2*0.95-1 fall just
// below 0.1 and 0.9. It reads p through the parser, as Decide gets it.
func TestNoulConfidence(t *testing.T) {
	r := newRouter(t, testConfig())
	qs := []evaluation.Question{q("yes", "noul")}
	tests := []struct {
		p    string
		want float64
	}{
		{"0", 1}, {"0.0", 1}, {"-0", 1}, {"0.001", 0.998}, {"0.01", 0.98},
		{"0.45", 0.1}, {"0.4999", 0.0002}, {"0.5", 0}, {"0.50", 0}, {"0.5001", 0.0002}, {"0.55", 0.1},
		{"0.15", 0.7}, {"0.85", 0.7}, {"0.95", 0.9}, {"0.99", 0.98}, {"0.999", 0.998}, {"1", 1}, {"1.0", 1},
		{"5e-1", 0}, {"4.5E-1", 0.1},
		{"0.1234567890123456789", 0.753086422}, // rounded to 9 decimals
		{"1e-401", 1},                          // underflows to 0
	}
	for _, tt := range tests {
		d := decideBody(r, qs, body("service-1.0.0", noul("yes", tt.p)), Signal{})
		if got := d.Questions[0]; !got.HasConfidence || got.Confidence != tt.want || math.Signbit(got.Confidence) {
			t.Errorf("noul %s: confidence %v (known %v), want %v", tt.p, got.Confidence, got.HasConfidence, tt.want)
		}
	}
	for _, p := range []string{"1.0000001", "-0.1", "2", "1e999", "-1e999", "NaN", "Infinity", "-Infinity"} {
		d := decideBody(r, qs, body("service-1.0.0", noul("yes", p)), Signal{})
		if got := d.Questions[0]; got.HasConfidence || d.Reason != ReasonUnreadableResponse {
			t.Errorf("noul %s: confidence %v accepted (%s), want unreadable", p, got.Confidence, d.Reason)
		}
	}

	// Against the 0.7 noul threshold.
	for p, want := range map[string]string{"0": "auto", "0.15": "auto", "0.1501": "human", "0.5": "human", "0.85": "auto", "0.8499": "human", "1": "auto"} {
		d := decideBody(r, qs, body("service-1.0.0", noul("yes", p)), Signal{})
		if d.Route != want {
			t.Errorf("noul %s: routed %s (%s, confidence %v), want %s", p, d.Route, d.Reason, d.MinConfidence, want)
		}
	}

	// Every two-decimal p gives the decimal |2p-1| exactly, as a threshold
	// written in the Caddyfile parses.
	for i := 0; i <= 100; i++ {
		p := fmt.Sprintf("%d.%02d", i/100, i%100)
		d := decideBody(r, qs, body("service-1.0.0", noul("yes", p)), Signal{})
		want, err := strconv.ParseFloat(fmt.Sprintf("%.2f", math.Abs(float64(2*i-100))/100), 64)
		if err != nil || d.Questions[0].Confidence != want {
			t.Errorf("noul %s: confidence %v, want %v", p, d.Questions[0].Confidence, want)
		}
	}
}

func TestDecideManyQuestionsOutOfOrder(t *testing.T) {
	r := newRouter(t, testConfig())
	var qs []evaluation.Question
	var answers []string
	for i := range 40 {
		id := "q" + strings.Repeat("x", i)
		qs = append(qs, q(id, "choice"))
		answers = append([]string{choice(id, "0.75")}, answers...) // reversed
	}
	answers = append(answers, choice("unknown", "0.1"))
	d := decideBody(r, qs, body("service-1.0.0", answers...), Signal{})
	if d.Reason != ReasonConfident || d.MinConfidence != 0.75 {
		t.Fatalf("got %s/%s min %v, want auto/confident 0.75", d.Route, d.Reason, d.MinConfidence)
	}
	d = decideBody(r, qs, body("service-1.0.0", answers[1:]...), Signal{})
	if d.Reason != ReasonUnreadableResponse || d.Questions[len(qs)-1].Route != RouteHuman {
		t.Fatalf("got %s/%s, want unreadable_response with the last question human", d.Route, d.Reason)
	}
}

func TestDecideDeepNesting(t *testing.T) {
	// evaluation.ParseResponse bounds nesting at 1000 levels, as the
	// upstream's Python json module does; the top-level object is the first.
	const parserDepth = 1000
	r := newRouter(t, testConfig())
	qs := []evaluation.Question{q("pick", "choice")}
	nest := func(n int) []byte {
		return []byte(`{"model":"service-1.0.0","answers":{` + choice("pick", "0.9") + `},"usage":` +
			strings.Repeat("[", n) + strings.Repeat("]", n) + `}`)
	}
	if d := decideBody(r, qs, nest(parserDepth-1), Signal{}); d.Reason != ReasonConfident {
		t.Errorf("nesting at the bound: %s, want confident", d.Reason)
	}
	if d := decideBody(r, qs, nest(parserDepth), Signal{}); d.Reason != ReasonUnreadableResponse {
		t.Errorf("nesting over the bound: %s, want unreadable_response", d.Reason)
	}
	if d := decideBody(r, qs, nest(1_000_000), Signal{}); d.Reason != ReasonUnreadableResponse {
		t.Errorf("nesting far over the bound: %s, want unreadable_response", d.Reason)
	}
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"threshold above 1", Config{Pins: []Pin{{Version: "v", Noul: ptr(1.01)}}}, "noul threshold 1.01 is outside 0..1"},
		{"threshold below 0", Config{Pins: []Pin{{Version: "v", Score: ptr(-0.1)}}}, "score threshold -0.1 is outside 0..1"},
		{"threshold NaN", Config{Pins: []Pin{{Version: "v", Choice: ptr(math.NaN())}}}, "choice threshold NaN is outside 0..1"},
		{"question threshold", Config{Pins: []Pin{{Version: "v", Questions: map[string]float64{"q1": 2}}}}, `question "q1" threshold 2 is outside 0..1`},
		{"version pinned twice", Config{Pins: []Pin{{Version: "v"}, {Version: "w"}, {Version: "v"}}}, `pin "v": version pinned twice`},
		{"empty version", Config{Pins: []Pin{{}}}, "empty version"},
		{"unknown unpinned", Config{Unpinned: "maybe"}, `unpinned must be "human" or "auto", not "maybe"`},
		{"queue without stream", Config{Queue: &Queue{}}, "queue: empty stream name"},
		{"negative maxlen", Config{Queue: &Queue{Stream: "s", MaxLen: -1}}, "negative maxlen"},
		{"queue without client", Config{Queue: &Queue{Stream: "review"}}, `queue "review" needs the systemone block's redis`},
		// The alarms are kept with the queue's stream: the queue's rule says it.
		{"on_alarm human without client", Config{Queue: &Queue{Stream: "review"}, OnAlarm: OnAlarmHuman}, `queue "review" needs the systemone block's redis`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, nil, "", nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	for _, cfg := range []Config{
		{},
		{Unpinned: "human"},
		{Pins: []Pin{{Version: "v", Noul: ptr(0), Choice: ptr(1), Questions: map[string]float64{"": 0.5}}}},
	} {
		if _, err := New(cfg, nil, "", nil); err != nil {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}
