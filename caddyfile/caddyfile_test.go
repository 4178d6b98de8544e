package caddyfile

import (
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/systemone/systemone-gateway/handlers"
	"github.com/systemone/systemone-gateway/policy/limits"
	"github.com/systemone/systemone-gateway/policy/route"
)

func parseString(t *testing.T, input string) (*handlers.Handler, error) {
	t.Helper()
	h := new(handlers.Handler)
	return h, Unmarshal(caddyfile.NewTestDispenser(input), h)
}

func TestUnmarshal(t *testing.T) {
	t.Setenv("SYSTEMONE_TEST_RPM", "42")
	t.Setenv("SYSTEMONE_TEST_BUDGET", "5.00")
	h, err := parseString(t, `systemone {
		max_body 2MiB
		limits {
			requests_per_minute {env.SYSTEMONE_TEST_RPM}
			tokens_per_second 0
			budget {env.SYSTEMONE_TEST_BUDGET} per month
			price 0.05
			budget_timezone Europe/Berlin
			org acme {
				token_burst 10
				budget 2.5 per day
			}
			store_timeout 20ms
			local_allowance 2.5% 50ms
		}
		breaker {
			failures 2
		}
		route {
			pin v1 {
				noul 0.7
				question "a b" 1
			}
			queue s
			include_content
			max_content 64KiB
		}
	}`)
	if err != nil {
		t.Fatal(err)
	}
	if r := h.Route; !r.IncludeContent || r.MaxContent != 64<<10 {
		t.Errorf("route include_content %v max_content %d", r.IncludeContent, r.MaxContent)
	}
	if h.MaxBody != 2<<20 {
		t.Errorf("max_body %d", h.MaxBody)
	}
	l := h.Limits
	if *l.RequestsPerMinute != 42 || *l.TokensPerSecond != 0 || l.TokenBurst != nil || *l.Orgs["acme"].TokenBurst != 10 ||
		time.Duration(l.StoreTimeout) != 20*time.Millisecond {
		t.Errorf("limits %+v", l)
	}
	if a := l.LocalAllowance; a == nil || *a.Share != 0.025 || time.Duration(a.Interval) != 50*time.Millisecond {
		t.Errorf("local_allowance %+v", a)
	}
	// Both arguments are optional: package limits has the defaults.
	t.Setenv("SYSTEMONE_TEST_SHARE", "3%")
	for input, share := range map[string]*float64{"": nil, " 50%": ptr(0.5), " {env.SYSTEMONE_TEST_SHARE}": ptr(0.03)} {
		h2, err := parseString(t, "systemone {\n limits {\n local_allowance"+input+"\n }\n}")
		if err != nil {
			t.Errorf("local_allowance%s: %v", input, err)
			continue
		}
		if a := h2.Limits.LocalAllowance; a == nil || (a.Share == nil) != (share == nil) || share != nil && *a.Share != *share || a.Interval != 0 {
			t.Errorf("local_allowance%s: %+v", input, a)
		}
	}
	// The modes: off alone, adaptive and always with the optional share
	// and interval after them.
	for input, want := range map[string]limits.LocalAllowance{
		" off":            {Mode: limits.AllowanceOff},
		" adaptive":       {Mode: limits.AllowanceAdaptive},
		" adaptive 5% 1s": {Mode: limits.AllowanceAdaptive, Share: ptr(0.05), Interval: caddy.Duration(time.Second)},
		" always 3%":      {Mode: limits.AllowanceAlways, Share: ptr(0.03)},
	} {
		h2, err := parseString(t, "systemone {\n limits {\n local_allowance"+input+"\n }\n}")
		if err != nil {
			t.Errorf("local_allowance%s: %v", input, err)
			continue
		}
		a := h2.Limits.LocalAllowance
		if a == nil || a.Mode != want.Mode || (a.Share == nil) != (want.Share == nil) || want.Share != nil && *a.Share != *want.Share || a.Interval != want.Interval {
			t.Errorf("local_allowance%s: %+v, want %+v", input, a, want)
		}
	}
	if *l.Budget != (limits.Budget{Yuan: 5_000_000_000, Per: limits.PerMonth}) || *l.Price != 50_000_000 || l.BudgetTimezone != "Europe/Berlin" ||
		*l.Orgs["acme"].Budget != (limits.Budget{Yuan: 2_500_000_000, Per: limits.PerDay}) {
		t.Errorf("budgets %+v %v %+v", l.Budget, l.Price, l.Orgs["acme"].Budget)
	}
	if h.Breaker.Failures != 2 || h.Breaker.OpenFor != 0 || h.Guardrails != nil {
		t.Errorf("breaker %+v guardrails %+v", h.Breaker, h.Guardrails)
	}
	p := h.Route.Pins[0]
	if p.Version != "v1" || *p.Noul != 0.7 || p.Choice != nil || p.Questions["a b"] != 1 || h.Route.Queue.Stream != "s" || h.Route.Queue.MaxLen != 0 {
		t.Errorf("route %+v", h.Route)
	}

	// Secrets keep their placeholders until provisioning.
	h, err = parseString(t, "systemone {\n guardrails http://g {\n api_key {env.SECRET}\n }\n}")
	if err != nil || h.Guardrails.APIKey != "{env.SECRET}" || h.Guardrails.URL != "http://g" {
		t.Errorf("guardrails %+v %v", h.Guardrails, err)
	}
	// per_org_metrics names more orgs, placeholders kept.
	h, err = parseString(t, "systemone {\n per_org_metrics acme {env.ORG}\n}")
	if err != nil || !h.PerOrgMetrics || len(h.MetricsOrgs) != 2 || h.MetricsOrgs[0] != "acme" || h.MetricsOrgs[1] != "{env.ORG}" {
		t.Errorf("per_org_metrics: %+v %v", h, err)
	}
	for input, want := range map[string]string{"": "", "on_alarm alert": route.OnAlarmAlert, "on_alarm human": route.OnAlarmHuman} {
		h, err = parseString(t, "systemone {\n redis redis://r\n route {\n queue s\n "+input+"\n }\n}")
		if err != nil || h.Route.OnAlarm != want {
			t.Errorf("%q: on_alarm %q, %v", input, h.Route.OnAlarm, err)
		}
	}
	h, err = parseString(t, "systemone {\n per_org_metrics\n}")
	if err != nil || !h.PerOrgMetrics || h.MetricsOrgs != nil {
		t.Errorf("bare per_org_metrics: %+v %v", h, err)
	}
	// A bare directive turns every policy off.
	h, err = parseString(t, "systemone")
	if err != nil || h.Limits != nil || h.Guardrails != nil || h.Breaker != nil || h.Route != nil {
		t.Errorf("bare directive: %+v %v", h, err)
	}
	// A bare block turns its policy on with defaults.
	h, err = parseString(t, "systemone {\n limits\n breaker\n}")
	if err != nil || h.Limits == nil || h.Breaker == nil {
		t.Errorf("bare blocks: %+v %v", h, err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestUnmarshalErrors(t *testing.T) {
	for input, want := range map[string]string{
		"systemone extra":                                   "wrong argument count",
		"systemone {\n max_body\n}":                         "wrong argument count",
		"systemone {\n max_body 0\n}":                       "max_body must not be 0: leave it out for its default",
		"systemone {\n limits {\n org a\n }\n}":             "overrides nothing",
		"systemone {\n limits {\n org a {\n x 1\n }\n }\n}": "unknown org subdirective",
		"systemone {\n limits {\n org a {\n token_burst 1\n }\n org a {\n token_burst 2\n }\n }\n}": "duplicate org",
		"systemone {\n limits {\n redis\n }\n}":                                                     `unknown limits subdirective "redis"`,
		"systemone {\n limits {\n budget 5\n }\n}":                                                  "want `budget <yuan> per day|month`",
		"systemone {\n limits {\n budget 5 a day\n }\n}":                                            "want `budget <yuan> per day|month`",
		"systemone {\n limits {\n budget 5 per day extra\n }\n}":                                    "wrong argument count",
		"systemone {\n limits {\n budget -5 per day\n }\n}":                                         "is not an amount in yuan",
		"systemone {\n limits {\n budget 5.0000001 per day\n }\n}":                                  "at most 6 decimals",
		"systemone {\n limits {\n price 1e-3\n }\n}":                                                "is not an amount in yuan",
		"systemone {\n limits {\n price 0\n }\n}":                                                   "want more than 0",
		"systemone {\n limits {\n budget_timezone\n }\n}":                                           "wrong argument count",
		"systemone {\n limits {\n org a {\n budget 1 per year\n }\n }\n}":                           `limits: org "a": budget 1.00 per "year": want per day or per month`,
		"systemone {\n limits {\n local_allowance 60%\n }\n}":                                       "local_allowance share 60%: want more than 0% and at most 50%",
		"systemone {\n limits {\n local_allowance 0%\n }\n}":                                        "want more than 0% and at most 50%",
		"systemone {\n limits {\n local_allowance 2\n }\n}":                                         "want a percentage such as 2%",
		"systemone {\n limits {\n local_allowance off 2%\n }\n}":                                    "local_allowance off takes no share or interval",
		"systemone {\n limits {\n local_allowance adaptive 2\n }\n}":                                "want a percentage such as 2%",
		"systemone {\n limits {\n local_allowance 2% 11s\n }\n}":                                    "local_allowance interval 11s: want 1ms to 10s",
		"systemone {\n limits {\n local_allowance 2% 500us\n }\n}":                                  "local_allowance interval 500µs: want 1ms to 10s",
		"systemone {\n limits {\n local_allowance 2% 0s\n }\n}":                                     "local_allowance interval must not be 0",
		"systemone {\n limits {\n local_allowance 2% 1s 3\n }\n}":                                   "wrong argument count",
		"systemone {\n limits {\n local_allowance\n local_allowance\n }\n}":                         "duplicate local_allowance",
		"systemone {\n redis\n}":                                                                    "wrong argument count",
		"systemone {\n per_org_metrics\n per_org_metrics a\n}":                                      "duplicate per_org_metrics",
		"systemone {\n guardrails\n}":                                                               "guardrails: url is required",
		"systemone {\n guardrails http://g {\n api_key k\n block high\n review high\n }\n}":         "both block and review",
		"systemone {\n guardrails http://g {\n api_key k\n block_category nudity\n }\n}":            `guardrails: block_category "nudity": must be one of political_sensitive`,
		"systemone {\n guardrails http://g {\n api_key k\n mode fast\n }\n}":                        `guardrails: mode "fast": must be sequential or parallel`,
		"systemone {\n breaker {\n failures 0\n }\n}":                                               "failures must not be 0: leave it out for its default",
		"systemone {\n breaker {\n half_open 4294967296\n }\n}":                                     `"4294967296" is not a whole number up to 4294967295`,
		"systemone {\n breaker {\n half_open -1\n }\n}":                                             `"-1" is not a whole number up to 4294967295`,
		"systemone {\n route {\n pin v {\n question q\n }\n }\n}":                                   "wrong argument count",
		"systemone {\n route {\n pin v {\n question q 0.5\n question q 0.6\n }\n }\n}":              "two thresholds",
		"systemone {\n route {\n unpinned maybe\n }\n}":                                             `route: unpinned must be "human" or "auto", not "maybe"`,
		"systemone {\n route {\n on_alarm page\n }\n}":                                              `route: on_alarm must be "alert" or "human", not "page"`,
		"systemone {\n route {\n on_alarm human\n }\n}":                                             "on_alarm human needs a queue",
		"systemone {\n route {\n queue s maxlen 5 flush\n }\n}":                                     "then maxlen <n>",
		"systemone {\n route {\n queue s include_content\n }\n}":                                    `queue takes a stream, then maxlen <n>, not "include_content"`,
		"systemone {\n route {\n queue s maxlen 0\n }\n}":                                           "maxlen must not be 0: leave it out for its default",
		"systemone {\n route {\n pin v {\n choice -0.1\n }\n }\n}":                                  "threshold -0.1 is outside 0..1",
		"systemone {\n route {\n queue s\n include_content\n max_content 0\n }\n}":                  "max_content must not be 0: leave it out for its default",
		"systemone {\n route {\n queue s\n include_content\n max_content lots\n }\n}":               "is not a size",
		"systemone {\n route {\n queue s\n include_content\n max_content 512\n }\n}":                "must be at least 1KiB",
		"systemone {\n route {\n queue s\n max_content 1MiB\n }\n}":                                 "max_content needs include_content",
	} {
		_, err := parseString(t, input)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", input, err, want)
		}
		if err != nil && !strings.Contains(err.Error(), "Testfile:") {
			t.Errorf("%q: error %v lacks file:line", input, err)
		}
	}
}
