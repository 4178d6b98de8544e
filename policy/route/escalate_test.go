package route

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/systemone/systemone-gateway/evaluation"
)

// escalateConfig pins service-1.0.0 (noul 0.7, no score line) and
// escalates it to service-2.0.0: noul 0.6 with a certificate, choice 0.5;
// score has no line there either.
func escalateConfig() Config {
	return Config{
		Pins: []Pin{{Version: "service-1.0.0", Noul: ptr(0.7), Choice: ptr(0.9)}},
		Escalations: []Escalation{{From: "service-1.0.0", To: Pin{
			Version: "service-2.0.0", Noul: ptr(0.6), NoulCert: "0123456789abcdef", Choice: ptr(0.5),
		}}},
	}
}

func TestEscalationPlan(t *testing.T) {
	r := newRouter(t, escalateConfig())
	qs := []evaluation.Question{q("sure", "noul"), q("unsure", "noul"), q("pick", "choice"), q("rate", "score")}
	first := body("service-1.0.0", noul("sure", "0.99"), noul("unsure", "0.5"), choice("pick", "0.6"), score("rate", "0.9"))

	d := decideBody(r, qs, first, Signal{})
	plan, ok := r.Escalation(d)
	// rate has no threshold under the pin, but none in the block either.
	if !ok || plan.To != "service-2.0.0" || len(plan.Questions) != 2 || plan.Questions[0] != 1 || plan.Questions[1] != 2 || plan.Timeout != DefaultEscalationTimeout {
		t.Fatalf("plan %+v %v, want unsure and pick of service-2.0.0 in 10s", plan, ok)
	}
	for _, tc := range []struct {
		name   string
		signal Signal
		body   []byte
	}{
		{"guardrails review", Signal{GuardrailsReview: true}, first},
		{"guardrails unchecked", Signal{GuardrailsUnchecked: true}, first},
		{"another version", Signal{}, body("service-2.0.0", noul("sure", "0.5"), noul("unsure", "0.5"), choice("pick", "0.1"), score("rate", "0.1"))},
		{"unreadable", Signal{}, []byte(`{"model":"service-1.0.0"}`)},
	} {
		if _, ok := r.Escalation(decideBody(r, qs, tc.body, tc.signal)); ok {
			t.Errorf("%s: escalated", tc.name)
		}
	}
	if _, ok := r.Escalation(decideBody(r, qs[:2], body("service-1.0.0", noul("sure", "1"), noul("unsure", "1")), Signal{})); ok {
		t.Error("confident: escalated")
	}

	// The second version answers unsure confidently, pick not: unsure
	// routes auto under the block's line, pick stays human.
	second := body("service-2.0.0", noul("unsure", "0.9"), choice("pick", "0.4"))
	resp, err := evaluation.ParseResponse(second)
	if err != nil {
		t.Fatal(err)
	}
	answered := r.ApplyEscalation(&d, plan, resp)
	if len(answered) != 1 || answered[0] != 1 {
		t.Fatalf("answered %v, want [1]", answered)
	}
	u, p := d.Questions[1], d.Questions[2]
	if u.Route != RouteAuto || u.Reason != ReasonEscalated || u.Certificate != "0123456789abcdef" || u.Escalated == nil || u.Escalated.Confidence != 0.8 || u.Confidence != 0 {
		t.Errorf("unsure %+v: want auto, escalated, the block's cert, the second confidence beside the first", u)
	}
	if p.Route != RouteHuman || p.Reason != ReasonLowConfidence || p.Escalated == nil || p.Escalated.Route != RouteHuman {
		t.Errorf("pick %+v: want human with its first reason, its second answer recorded", p)
	}
	// rate has no threshold: no_threshold comes before low_confidence.
	if d.Route != RouteHuman || d.Reason != ReasonNoThreshold {
		t.Errorf("decision %s %s, want human no_threshold", d.Route, d.Reason)
	}
	h := map[string][]string{}
	d.SetHeaders(h)
	if got := h[HeaderEscalated]; len(got) != 1 || got[0] != "unsure=service-2.0.0" {
		t.Errorf("X-Route-Escalated %v", got)
	}
	if got := h[HeaderQuestions]; len(got) != 1 || got[0] != "sure=auto, unsure=auto, pick=human, rate=human" {
		t.Errorf("X-Route-Questions %v", got)
	}
}

func TestEscalationAllAutoReroutes(t *testing.T) {
	r := newRouter(t, escalateConfig())
	qs := []evaluation.Question{q("sure", "noul"), q("unsure", "noul")}
	d := decideBody(r, qs, body("service-1.0.0", noul("sure", "0.95"), noul("unsure", "0.5")), Signal{})
	plan, ok := r.Escalation(d)
	if !ok {
		t.Fatal("not escalated")
	}
	resp, _ := evaluation.ParseResponse(body("service-2.0.0", noul("unsure", "0.85")))
	r.ApplyEscalation(&d, plan, resp)
	if d.Route != RouteAuto || d.Reason != ReasonEscalated || !d.HasMinConfidence || d.MinConfidence != 0.7 {
		t.Errorf("decision %s %s min %v, want auto escalated, lowest confidence 0.70 (the second answer's)", d.Route, d.Reason, d.MinConfidence)
	}
}

func TestEscalationValidate(t *testing.T) {
	pin := Pin{Version: "service-1.0.0", Noul: ptr(0.8)}
	to := func(p Pin) Pin { p.Version = "service-2.0.0"; return p }
	for _, tc := range []struct {
		name string
		es   []Escalation
		want string
	}{
		{"same version", []Escalation{{From: "service-1.0.0", To: Pin{Version: "service-1.0.0", Noul: ptr(0.5)}}}, "escalates to the version it escalates from"},
		{"unpinned first", []Escalation{{From: "service-0.1.0", To: to(Pin{Noul: ptr(0.5)})}}, "needs a pin of service-0.1.0"},
		{"threshold out of range", []Escalation{{From: "service-1.0.0", To: to(Pin{Choice: ptr(-0.1)})}}, "choice threshold -0.1 is outside 0..1"},
		{"question out of range", []Escalation{{From: "service-1.0.0", To: to(Pin{Questions: map[string]float64{"q": 2}})}}, `question "q" threshold 2 is outside 0..1`},
		{"no line", []Escalation{{From: "service-1.0.0", To: to(Pin{})}}, "has no threshold line"},
		{"org block", []Escalation{{From: "service-1.0.0", To: to(Pin{Noul: ptr(0.5), Orgs: []OrgPin{{Org: "acme"}}})}}, "takes no org blocks"},
		{"negative timeout", []Escalation{{From: "service-1.0.0", To: to(Pin{Noul: ptr(0.5)}), Timeout: caddy.Duration(-time.Second)}}, "timeout -1s must be positive"},
		{"twice", []Escalation{{From: "service-1.0.0", To: to(Pin{Noul: ptr(0.5)})}, {From: "service-1.0.0", To: Pin{Version: "service-3.0.0", Noul: ptr(0.5)}}}, "escalated from twice"},
	} {
		err := Config{Pins: []Pin{pin}, Escalations: tc.es}.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	ok := Config{Pins: []Pin{pin}, Escalations: []Escalation{{From: "service-1.0.0", To: to(Pin{Noul: ptr(0.5)}), Timeout: caddy.Duration(time.Second)}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("a valid block: %v", err)
	}
}

// A question asked again carries its second answer in the review entry,
// beside its first: `escalated` {model, confidence, answer, route}.
func TestEnqueueEscalated(t *testing.T) {
	r, _, client, _ := queueRouter(t, Queue{Stream: "review"}, func(c *Config) {
		c.Pins = escalateConfig().Pins
		c.Escalations = escalateConfig().Escalations
	})
	qs := []evaluation.Question{q("sure", "noul"), q("unsure", "noul"), q("pick", "choice")}
	d := decideBody(r, qs, body("service-1.0.0", noul("sure", "0.99"), noul("unsure", "0.5"), choice("pick", "0.6")), Signal{})
	plan, ok := r.Escalation(d)
	if !ok {
		t.Fatal("not escalated")
	}
	resp, _ := evaluation.ParseResponse(body("service-2.0.0", noul("unsure", "0.9"), choice("pick", "0.4")))
	r.ApplyEscalation(&d, plan, resp)
	r.Enqueue(context.Background(), d, Meta{RequestID: "req-1"})
	r.Close()
	msgs := readStream(t, client, "review")
	if len(msgs) != 1 {
		t.Fatalf("%d entries, want 1", len(msgs))
	}
	want := `[{"id":"sure","type":"noul","route":"auto","confidence":0.98,"answer":0.99,"reason":"confident"},` +
		`{"id":"unsure","type":"noul","route":"auto","confidence":0,"answer":0.5,"reason":"low_confidence","escalated":{"model":"service-2.0.0","confidence":0.8,"answer":0.9,"route":"auto"}},` +
		`{"id":"pick","type":"choice","route":"human","confidence":0.6,"answer":"good","reason":"low_confidence","escalated":{"model":"service-2.0.0","confidence":0.4,"answer":"good","route":"human"}}]`
	if got := msgs[0].Values["questions"]; got != want || msgs[0].Values["reason"] != ReasonLowConfidence || msgs[0].Values["route"] != RouteHuman {
		t.Errorf("entry %v %v questions\n%s\nwant\n%s", msgs[0].Values["route"], msgs[0].Values["reason"], got, want)
	}
}
