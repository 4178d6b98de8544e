package caddyfile_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	systemone "github.com/systemone/systemone-gateway/caddyfile"
	"github.com/systemone/systemone-gateway/handlers"
)

const pinFirst = "pin service-1.0.0 {\n noul 0.8\n }\n"

// An escalate block's faults name its line: the parser's own, and
// package route's Validate, wrapped with the file and line of the
// escalate line (line 4 is the route block's first line).
func TestEscalateErrors(t *testing.T) {
	for lines, want := range map[string]string{
		pinFirst + "escalate service-1.0.0 to service-1.0.0 {\n noul 0.5\n }": `route: escalate "service-1.0.0" to "service-1.0.0": escalates to the version it escalates from, at Caddyfile:7`,
		// The pin may come after; a missing one is named all the same.
		"escalate service-1.0.0 to service-2.0.0 {\n noul 0.5\n }\n" + pinFirst:                                                         "", // valid
		"escalate service-1.0.0 to service-2.0.0 {\n noul 0.5\n }":                                                                      `route: escalate "service-1.0.0" to "service-2.0.0": needs a pin of service-1.0.0: its thresholds decide which questions are escalated, at Caddyfile:4`,
		pinFirst + "escalate service-1.0.0 to service-2.0.0 {\n score 1.5\n }":                                                          `score threshold 1.5 is outside 0..1, at Caddyfile:7`,
		pinFirst + "escalate service-1.0.0 to service-2.0.0 {\n noul 0.5\n noul 0.6\n }":                                                "duplicate noul, at Caddyfile:9",
		pinFirst + "escalate service-1.0.0 to service-2.0.0 {\n question q 0.5\n question q 0.6\n }":                                    `question "q" has two thresholds in escalate to "service-2.0.0", at Caddyfile:9`,
		pinFirst + "escalate service-1.0.0 to service-2.0.0 {\n noul 0.5\n timeout 0\n }":                                               "timeout must not be 0: leave it out for its default, at Caddyfile:9",
		pinFirst + "escalate service-1.0.0 to service-2.0.0 {\n noul 0.5\n timeout -2s\n }":                                             `timeout -2s must be positive, at Caddyfile:7`,
		pinFirst + "escalate service-1.0.0 service-2.0.0 {\n noul 0.5\n }":                                                              "escalate takes <version> to <version>, at Caddyfile:7",
		pinFirst + "escalate service-1.0.0 to service-2.0.0 more {\n noul 0.5\n }":                                                      "wrong argument count or unexpected line ending after 'more', at Caddyfile:7",
		pinFirst + "escalate service-1.0.0 to service-2.0.0 {\n org acme {\n noul 0.5\n }\n }":                                          `unknown escalate subdirective "org", at Caddyfile:8`,
		pinFirst + "escalate service-1.0.0 to service-2.0.0 {\n }":                                                                      "has no threshold line: no question would be escalated, at Caddyfile:7",
		pinFirst + "escalate service-1.0.0 to service-2.0.0 {\n noul 0.5\n }\nescalate service-1.0.0 to service-3.0.0 {\n noul 0.5\n }": `escalate "service-1.0.0": escalated from twice; one version has one second opinion, at Caddyfile:10`,
	} {
		err := adaptAndProvision(routeSite(lines))
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v, want it accepted", lines, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: error %v, want %q", lines, err, want)
		}
	}
}

// An escalate block adapts to the config it means, placeholders in its
// versions resolved when provisioned.
func TestEscalateAdapts(t *testing.T) {
	d := caddyfile.NewTestDispenser(`systemone {
		route {
			pin service-1.0.0 {
				noul 0.8
			}
			escalate service-1.0.0 to {env.SECOND} {
				noul 0.6 cert 0123456789abcdef
				choice 0.5
				question legal 0.9 cert fedcba9876543210
				timeout 2s
			}
		}
	}`)
	var h handlers.Handler
	if err := systemone.Unmarshal(d, &h); err != nil {
		t.Fatal(err)
	}
	if len(h.Route.Escalations) != 1 {
		t.Fatalf("escalations %+v", h.Route.Escalations)
	}
	e := h.Route.Escalations[0]
	got, _ := json.Marshal(e)
	want := `{"from":"service-1.0.0","to":{"version":"{env.SECOND}","noul":0.6,"choice":0.5,"noul_cert":"0123456789abcdef","questions":{"legal":0.9},"question_certs":{"legal":"fedcba9876543210"}},"timeout":2000000000}`
	if string(got) != want {
		t.Errorf("adapted %s\nwant %s", got, want)
	}
	if time.Duration(e.Timeout) != 2*time.Second || e.To.Version != "{env.SECOND}" {
		t.Errorf("escalation %+v", e)
	}
}
