package harness

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
)

// Reference returns the upstream's own answer to body, asked directly,
// twice: the simulator must be deterministic for a comparison with it to
// mean anything. With the stub upstream in use, the simulator's answer is
// registered with the stub first, and the stub must then give it back.
func (s *Stack) Reference(ctx context.Context, d *Driver, body []byte) ([]byte, error) {
	direct := Request{URL: s.SimulatorURL + "/v1/systemone", Key: Keys[0], Body: body}
	want, err := d.Answer(ctx, direct)
	if err != nil {
		return nil, fmt.Errorf("asking the upstream directly: %w", err)
	}
	if s.Upstream == UpstreamStub {
		if err := s.register(ctx, body, want); err != nil {
			return nil, err
		}
		direct.URL = s.StubURL + "/v1/systemone"
	}
	direct.Want = want
	var again bytes.Buffer
	if err := d.Do(ctx, direct, &again); err != nil {
		return nil, fmt.Errorf("the upstream's answers to two identical requests differ: %w", err)
	}
	return want, nil
}

// Requests returns the requests of config for body, one per key, each
// expecting want and the configuration's headers. Cached's name the
// concrete version the payloads' alias answers with (see ConcreteVersion);
// Everything's keep the alias, whose answers are never stored, and go out
// over 256 keys (see missKeys).
func (s *Stack) Requests(config string, body, want []byte) []Request {
	keys := Keys
	if config == Everything {
		keys = missKeys
	}
	reqs := make([]Request, len(keys))
	check := HeaderCheck(config)
	if config == Cached {
		body = ConcreteVersion(body)
	}
	for i, key := range keys {
		reqs[i] = Request{URL: s.URLs[config] + "/v1/systemone", Key: key, Body: body, Want: want, Check: check}
	}
	return reqs
}

// The payloads ask the alias service-latest, whose answers the cache never
// stores; Cached's requests ask the version it answers with, written so
// that the body keeps its length (the stub upstream answers by length).
var (
	alias    = []byte(`"model":"service-latest"`)
	concrete = []byte(`"model": "service-1.0.0"`)
)

// ConcreteVersion is body asking service-1.0.0 instead of service-latest,
// with the same length.
func ConcreteVersion(body []byte) []byte {
	return bytes.Replace(body, alias, concrete, 1)
}

// CachedAnswers counts the answers to Cached's checked requests by X-Cache.
var CachedAnswers struct{ Hits, Misses atomic.Int64 }

// MissedAnswers counts Everything's checked answers, every one a miss (a
// hit is an error).
var MissedAnswers atomic.Int64

// Prime sends each request once, unchecked but for its answer, so that
// Cached's answers are stored before a measured (and header-checked) run
// sees only hits.
func (s *Stack) Prime(ctx context.Context, d *Driver, reqs []Request) error {
	var buf bytes.Buffer
	for _, r := range reqs {
		r.Check = nil
		if err := d.Do(ctx, r, &buf); err != nil {
			return fmt.Errorf("priming the answer cache: %w", err)
		}
	}
	return nil
}

// HeaderCheck makes sure an answer went through the configuration's
// policies: the gateway's X-RateLimit-* and X-Route* headers, X-Budget-*
// with a budget, X-Guardrails-* with guardrails on, and X-Cache with the
// answer cache (Cached's hits, Everything's misses). P's and nginx's
// answers must carry none of them.
func HeaderCheck(config string) func(http.Header) error {
	type field struct{ name, want string }
	want := []field{{"X-Route-Model", ""}, {"X-Ratelimit-Limit-Requests", ""}, {"X-Guardrails-Action", ""}, {"X-Guardrails-Risk", ""}}
	gateway := IsGateway(config)
	if gateway {
		want[0].want, want[1].want = "service-1.0.0", "10000000"
	}
	if config == Guardrails || config == GuardrailsCached || config == Everything {
		want[2].want, want[3].want = "pass", "none"
	}
	budget := config == LimitsBudget || config == Everything
	if !budget {
		want = append(want, field{"X-Budget-Limit", ""})
	}
	if config != Cached && config != Everything {
		want = append(want, field{"X-Cache", ""})
	}
	if config != Escalated {
		// Only Escalated's block takes a question: Xn's looks at each
		// answer and escalates none.
		want = append(want, field{"X-Route-Escalated", ""})
	}
	return func(h http.Header) error {
		for _, f := range want {
			if got := h.Get(f.name); got != f.want {
				return fmt.Errorf("header %s is %q, want %q", f.name, got, f.want)
			}
		}
		if r := h.Get("X-Route"); gateway && r != "auto" && r != "human" {
			return fmt.Errorf("header X-Route is %q", r)
		}
		if budget && (h.Get("X-Budget-Limit") == "" || h.Get("X-Budget-Remaining") == "") {
			return fmt.Errorf("headers X-Budget-Limit %q and X-Budget-Remaining %q: the budget was not checked",
				h.Get("X-Budget-Limit"), h.Get("X-Budget-Remaining"))
		}
		switch config {
		case Cached:
			// A miss is the cache's answer to a Redis lookup over its
			// timeout (a loaded machine): counted, not an error.
			switch h.Get("X-Cache") {
			case "hit":
				CachedAnswers.Hits.Add(1)
			case "miss":
				CachedAnswers.Misses.Add(1)
			default:
				return fmt.Errorf("header X-Cache is %q", h.Get("X-Cache"))
			}
		case Everything:
			// The alias's answers are never stored: a hit would be a
			// broken cache.
			if got := h.Get("X-Cache"); got != "miss" {
				return fmt.Errorf("header X-Cache is %q, want \"miss\"", got)
			}
			MissedAnswers.Add(1)
		}
		return nil
	}
}
