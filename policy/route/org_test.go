package route

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/evaluation"
)

// Certificate ids of the lines of orgConfig.
const (
	certNoul   = "aaaaaaaaaaaaaaa1" // the pin's noul line
	certStrict = "aaaaaaaaaaaaaaa2" // question strict
	certAcme   = "aaaaaaaaaaaaaaa3" // acme's noul line
	certGlobex = "aaaaaaaaaaaaaaa4" // globex's score line
)

// orgConfig pins service-1.0.0 with pooled noul (certified) and choice
// lines and no score line, a certified line for question strict, a choice
// line for question vip, and two orgs: acme with a stricter noul line of
// its own and choice human, globex with a score line and a lower choice
// line.
func orgConfig(fallback string) Config {
	return Config{OrgFallback: fallback, Pins: []Pin{{
		Version: "service-1.0.0",
		Noul:    ptr(0.8), NoulCert: certNoul,
		Choice:        ptr(0.6),
		Questions:     map[string]float64{"strict": 0.95, "vip": 0.5},
		QuestionCerts: map[string]string{"strict": certStrict},
		Orgs: []OrgPin{
			{Org: "acme", Lines: []OrgLine{
				{Type: evaluation.TypeNoul, Threshold: ptr(0.9), Cert: certAcme},
				{Type: evaluation.TypeChoice, Human: true},
			}},
			{Org: "globex", Lines: []OrgLine{
				{Type: evaluation.TypeScore, Threshold: ptr(0.7), Cert: certGlobex},
				{Type: evaluation.TypeChoice, Threshold: ptr(0.3)},
			}},
		},
	}}}
}

// orgQuestions are a noul (yes), a choice (pick), a score (rate), the noul
// question with a question line (strict) and the choice one (vip).
var orgQuestions = []evaluation.Question{q("yes", "noul"), q("pick", "choice"), q("rate", "score"), q("strict", "noul"), q("vip", "choice")}

// questionLine is what a test expects of one question: route, threshold
// ("-" for none) and certificate.
func questionLine(q QuestionRoute) string {
	threshold := "-"
	if q.HasThreshold {
		threshold = strconv.FormatFloat(q.Threshold, 'f', -1, 64)
	}
	s := q.ID + "=" + q.Route + "@" + threshold
	if q.Certificate != "" {
		s += "#" + q.Certificate
	}
	return s
}

// TestOrgThresholdOrder follows the order a question's threshold is chosen
// in: its question line, else its org's line for the type (human there
// means no threshold), else the pin's type line (org_fallback pooled) or
// none with org_no_threshold (org_fallback human).
func TestOrgThresholdOrder(t *testing.T) {
	// Confidences: yes 0.84 (p 0.92), pick 0.5, rate 0.75, strict 0.98, vip 0.55.
	answers := body("service-1.0.0", noul("yes", "0.92"), choice("pick", "0.5"), score("rate", "0.75"), noul("strict", "0.99"), choice("vip", "0.55"))
	for _, tt := range []struct {
		fallback, org string
		reason        string
		lines         string
	}{
		// acme's own noul line (0.9) beats the pooled 0.8: yes is low.
		// Its choice is human, but vip's question line still applies.
		// It has no score line and the pin none: no_threshold.
		{"", "acme", ReasonNoThreshold,
			"yes=human@0.9#" + certAcme + " pick=human@- rate=human@- strict=auto@0.95#" + certStrict + " vip=auto@0.5"},
		// globex's choice line (0.3) lets pick through where the pooled 0.6
		// would not; its noul falls back to the pooled, certified line.
		{"", "globex", ReasonConfident,
			"yes=auto@0.8#" + certNoul + " pick=auto@0.3 rate=auto@0.7#" + certGlobex + " strict=auto@0.95#" + certStrict + " vip=auto@0.5"},
		// An org with no block, and a request with no org, take the pin's lines.
		{"", "initech", ReasonNoThreshold,
			"yes=auto@0.8#" + certNoul + " pick=human@0.6 rate=human@- strict=auto@0.95#" + certStrict + " vip=auto@0.5"},
		{"", "", ReasonNoThreshold,
			"yes=auto@0.8#" + certNoul + " pick=human@0.6 rate=human@- strict=auto@0.95#" + certStrict + " vip=auto@0.5"},
		{"pooled", "initech", ReasonNoThreshold,
			"yes=auto@0.8#" + certNoul + " pick=human@0.6 rate=human@- strict=auto@0.95#" + certStrict + " vip=auto@0.5"},
		// org_fallback human: a type without an org line is human,
		// org_no_threshold, reported before acme's own human line.
		{"human", "acme", ReasonOrgNoThreshold,
			"yes=human@0.9#" + certAcme + " pick=human@- rate=human@- strict=auto@0.95#" + certStrict + " vip=auto@0.5"},
		{"human", "globex", ReasonOrgNoThreshold,
			"yes=human@- pick=auto@0.3 rate=auto@0.7#" + certGlobex + " strict=auto@0.95#" + certStrict + " vip=auto@0.5"},
		{"human", "initech", ReasonOrgNoThreshold,
			"yes=human@- pick=human@- rate=human@- strict=auto@0.95#" + certStrict + " vip=auto@0.5"},
	} {
		r := newRouter(t, orgConfig(tt.fallback))
		d := decideBody(r, orgQuestions, answers, Signal{Org: tt.org})
		var got []string
		for _, q := range d.Questions {
			got = append(got, questionLine(q))
		}
		if strings.Join(got, " ") != tt.lines || d.Reason != tt.reason || d.Route != RouteAuto && tt.reason == ReasonConfident {
			t.Errorf("org_fallback %q, org %q:\n got %s %s\nwant %s",
				tt.fallback, tt.org, d.Reason, strings.Join(got, " "), tt.reason+" "+tt.lines)
		}
	}
}

// The reasons for no threshold rank under the ones that make thresholds
// moot, and org_no_threshold over no_threshold and low_confidence.
func TestOrgNoThresholdRank(t *testing.T) {
	r := newRouter(t, orgConfig(OrgFallbackHuman))
	qs := []evaluation.Question{q("pick", "choice"), q("yes", "noul"), q("rate", "score")}
	// acme: pick human (no_threshold), yes low (0.2 < 0.9), rate without
	// an acme line (org_no_threshold).
	b := body("service-1.0.0", choice("pick", "0.9"), noul("yes", "0.6"), score("rate", "0.9"))
	if d := decideBody(r, qs, b, Signal{Org: "acme"}); d.Reason != ReasonOrgNoThreshold {
		t.Errorf("reason %s, want org_no_threshold", d.Reason)
	}
	if d := decideBody(r, qs, b, Signal{Org: "acme", GuardrailsReview: true}); d.Reason != ReasonGuardrailsReview {
		t.Errorf("reason %s, want guardrails_review", d.Reason)
	}
	if d := decideBody(r, qs[:2], body("service-1.0.0", choice("pick", "0.9"), noul("yes", "0.6")), Signal{Org: "acme"}); d.Reason != ReasonNoThreshold {
		t.Errorf("reason %s, want no_threshold (acme's choice human) before low_confidence", d.Reason)
	}
}

// X-Route-Certificate names, in the request's order and with ids encoded
// as X-Route-Questions has them, the certificate of each question routed
// auto under a line that carries one, and nothing else.
func TestCertificateHeader(t *testing.T) {
	r := newRouter(t, Config{Pins: []Pin{{
		Version: "service-1.0.0",
		Noul:    ptr(0.8), NoulCert: certNoul,
		Choice: ptr(0.6), // no certificate
		Score:  ptr(0.5), ScoreCert: certGlobex,
		Orgs: []OrgPin{{Org: "acme", Lines: []OrgLine{{Type: evaluation.TypeNoul, Threshold: ptr(0.5), Cert: certAcme}}}},
	}}, Unpinned: RouteAuto})
	qs := []evaluation.Question{q("a,b", "noul"), q("pick", "choice"), q("中文", "noul"), q("low", "score"), q("x=y", "score")}
	b := body("service-1.0.0", noul("a,b", "0.95"), choice("pick", "0.9"), noul("中文", "0.05"), score("low", "0.2"), score("x=y", "0.6"))

	h := http.Header{HeaderCertificate: {"forged=0000000000000000"}}
	d := decideBody(r, qs, b, Signal{})
	d.SetHeaders(h)
	want := "a%2Cb=" + certNoul + ", %E4%B8%AD%E6%96%87=" + certNoul + ", x%3Dy=" + certGlobex
	if got := h.Get(HeaderCertificate); got != want {
		t.Errorf("X-Route-Certificate %q, want %q", got, want)
	}
	if got := d.Certificates(); got != certNoul+","+certGlobex {
		t.Errorf("Certificates() %q, want each id once, in the order first named", got)
	}

	// acme's own line names its own certificate.
	d = decideBody(r, qs[:1], body("service-1.0.0", noul("a,b", "0.8")), Signal{Org: "acme"})
	d.SetHeaders(h)
	if got := h.Get(HeaderCertificate); got != "a%2Cb="+certAcme {
		t.Errorf("acme: X-Route-Certificate %q", got)
	}

	// No question auto under a certified line: no header, whatever the
	// upstream sent.
	for name, d := range map[string]Decision{
		"low confidence": decideBody(r, qs[:1], body("service-1.0.0", noul("a,b", "0.6")), Signal{}),
		"uncertified":    decideBody(r, qs[1:2], body("service-1.0.0", choice("pick", "0.9")), Signal{}),
		"unpinned auto":  decideBody(r, qs[:1], body("service-2.0.0", noul("a,b", "1")), Signal{}),
		"unreadable":     r.Decide(qs[:1], nil, Signal{}),
	} {
		h := http.Header{HeaderCertificate: {"a%2Cb=" + certNoul}}
		d.SetHeaders(h)
		if v, ok := h[HeaderCertificate]; ok {
			t.Errorf("%s: X-Route-Certificate %q, want none", name, v)
		}
		if c := d.Certificates(); c != "" {
			t.Errorf("%s: Certificates() %q, want empty", name, c)
		}
	}
}

// humanNoul is an org's one line: noul routes human.
var humanNoul = []OrgLine{{Type: evaluation.TypeNoul, Human: true}}

// Every check of a pin's lines, with the words both a Caddyfile and a JSON
// config get.
func TestValidateOrgsAndCertificates(t *testing.T) {
	pin := func(p Pin) Config { p.Version = "v"; return Config{Pins: []Pin{p}} }
	org := func(lines ...OrgLine) Config { return pin(Pin{Orgs: []OrgPin{{Org: "acme", Lines: lines}}}) }
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"org_fallback", Config{OrgFallback: "maybe"}, `org_fallback must be "pooled" or "human", not "maybe"`},
		{"cert upper case", pin(Pin{Noul: ptr(0.9), NoulCert: "0123456789ABCDEF"}), `pin "v": noul cert "0123456789ABCDEF": a certificate id is 16 lowercase hex digits`},
		{"cert short", pin(Pin{Choice: ptr(0.9), ChoiceCert: "0123456789abcde"}), `pin "v": choice cert "0123456789abcde": a certificate id is 16 lowercase hex digits`},
		{"cert long", pin(Pin{Score: ptr(0.9), ScoreCert: "0123456789abcdef0"}), `pin "v": score cert "0123456789abcdef0": a certificate id is 16 lowercase hex digits`},
		{"cert not hex", pin(Pin{Noul: ptr(0.9), NoulCert: "0123456789abcdeg"}), `pin "v": noul cert "0123456789abcdeg": a certificate id is 16 lowercase hex digits`},
		{"cert without threshold", pin(Pin{NoulCert: "0123456789abcdef"}), `pin "v": noul cert "0123456789abcdef" without a threshold`},
		{"question cert", pin(Pin{Questions: map[string]float64{"q": 0.9}, QuestionCerts: map[string]string{"q": "x"}}), `pin "v": question "q" cert "x": a certificate id is 16 lowercase hex digits`},
		{"question cert without threshold", pin(Pin{QuestionCerts: map[string]string{"q": "0123456789abcdef"}}), `pin "v": question "q" cert "0123456789abcdef" without a threshold`},
		{"org without a name", pin(Pin{Orgs: []OrgPin{{}}}), `pin "v": org with an empty name`},
		{"org twice", pin(Pin{Orgs: []OrgPin{{Org: "acme", Lines: humanNoul}, {Org: "globex", Lines: humanNoul}, {Org: "acme", Lines: humanNoul}}}), `pin "v": org "acme" given twice`},
		{"org without lines", pin(Pin{Orgs: []OrgPin{{Org: "acme"}}}), `pin "v": org "acme": no lines: give a type a threshold or human, or leave the org out`},
		{"threshold -0", pin(Pin{Noul: ptr(math.Copysign(0, -1))}), `pin "v": noul threshold -0 is negative: a threshold is in 0..1`},
		{"question threshold -0", pin(Pin{Questions: map[string]float64{"q": math.Copysign(0, -1)}}), `pin "v": question "q" threshold -0 is negative: a threshold is in 0..1`},
		{"org threshold -0", org(OrgLine{Type: "score", Threshold: ptr(math.Copysign(0, -1))}), `pin "v": org "acme": score threshold -0 is negative: a threshold is in 0..1`},
		{"unknown type", org(OrgLine{Type: "rate", Threshold: ptr(0.5)}), `pin "v": org "acme": unknown question type "rate": want one of [noul choice score]`},
		{"type twice", org(OrgLine{Type: "noul", Threshold: ptr(0.5)}, OrgLine{Type: "noul", Human: true}), `pin "v": org "acme": noul given twice`},
		{"threshold and human", org(OrgLine{Type: "noul", Threshold: ptr(0.5), Human: true}), `pin "v": org "acme": noul is a threshold or human, not both`},
		{"neither", org(OrgLine{Type: "choice"}), `pin "v": org "acme": choice needs a threshold or human`},
		{"human with cert", org(OrgLine{Type: "score", Human: true, Cert: "0123456789abcdef"}), `pin "v": org "acme": score human takes no cert: nothing routes auto under it`},
		{"org threshold above 1", org(OrgLine{Type: "choice", Threshold: ptr(1.2)}), `pin "v": org "acme": choice threshold 1.2 is outside 0..1`},
		{"org threshold NaN", org(OrgLine{Type: "noul", Threshold: ptr(math.NaN())}), `pin "v": org "acme": noul threshold NaN is outside 0..1`},
		{"org cert", org(OrgLine{Type: "noul", Threshold: ptr(0.5), Cert: "cert"}), `pin "v": org "acme": noul cert "cert": a certificate id is 16 lowercase hex digits`},
	} {
		err := tt.cfg.Validate()
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
		}
	}
	if err := orgConfig(OrgFallbackHuman).Validate(); err != nil {
		t.Errorf("orgConfig: %v", err)
	}
}

// Org names take placeholders, resolved when the router is built, as
// versions and question ids do.
func TestOrgNamePlaceholder(t *testing.T) {
	t.Setenv("SYSTEMONE_TEST_ORG", "acme")
	cfg := orgConfig("")
	cfg.Pins[0].Orgs[0].Org = "{env.SYSTEMONE_TEST_ORG}"
	d := decideBody(newRouter(t, cfg), orgQuestions[:1], body("service-1.0.0", noul("yes", "0.92")), Signal{Org: "acme"})
	if d.Questions[0].Threshold != 0.9 {
		t.Errorf("threshold %v, want acme's 0.9", d.Questions[0].Threshold)
	}
}
