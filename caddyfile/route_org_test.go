package caddyfile_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	"github.com/systemone/systemone-gateway/policy/route"
)

// routeSite is a Caddyfile whose systemone directive holds a route block
// with the given lines.
func routeSite(lines string) string {
	return ":8080 {\n\tsystemone {\n\t\troute {\n" + lines + "\n\t\t}\n\t}\n\trespond ok\n}\n"
}

// routeJSON is a JSON config whose systemone handler has the given route
// config.
func routeJSON(routeConfig string) *caddy.Config {
	cfg := new(caddy.Config)
	text := `{"admin": {"disabled": true}, "apps": {"http": {"servers": {"s": {"listen": [":8080"],
		"routes": [{"handle": [{"handler": "systemone", "route": ` + routeConfig + `}]}]}}}}}`
	if err := json.Unmarshal([]byte(text), cfg); err != nil {
		panic(fmt.Sprintf("%v: %s", err, text))
	}
	return cfg
}

// TestRouteOrgsOneMessage: each invalid org block, org_fallback or
// certificate id gets the same words from a Caddyfile (wrapped with its
// file and line) as from the JSON config that says the same thing, since
// one check, the route policy's Validate, refuses both.
func TestRouteOrgsOneMessage(t *testing.T) {
	for _, tt := range []struct {
		name      string
		caddyfile string // the route block's lines
		json      string // the route config
		want      string
	}{
		{"unknown type",
			"pin v {\n org acme {\n rate 0.9\n }\n }",
			`{"pins": [{"version": "v", "orgs": [{"org": "acme", "lines": [{"type": "rate", "threshold": 0.9}]}]}]}`,
			`pin "v": org "acme": unknown question type "rate": want one of [noul choice score]`},
		{"org threshold above 1",
			"pin v {\n org acme {\n choice 1.2\n }\n }",
			`{"pins": [{"version": "v", "orgs": [{"org": "acme", "lines": [{"type": "choice", "threshold": 1.2}]}]}]}`,
			`pin "v": org "acme": choice threshold 1.2 is outside 0..1`},
		{"org threshold below 0",
			"pin v {\n org acme {\n score -0.1 cert 0123456789abcdef\n }\n }",
			`{"pins": [{"version": "v", "orgs": [{"org": "acme", "lines": [{"type": "score", "threshold": -0.1, "cert": "0123456789abcdef"}]}]}]}`,
			`pin "v": org "acme": score threshold -0.1 is outside 0..1`},
		{"pin threshold with a cert",
			"pin v {\n noul 1.5 cert 0123456789abcdef\n }",
			`{"pins": [{"version": "v", "noul": 1.5, "noul_cert": "0123456789abcdef"}]}`,
			`pin "v": noul threshold 1.5 is outside 0..1`},
		{"org given twice",
			"pin v {\n org acme {\n noul 0.9\n }\n org globex {\n noul 0.8\n }\n org acme {\n choice 0.8\n }\n }",
			`{"pins": [{"version": "v", "orgs": [{"org": "acme", "lines": [{"type": "noul", "threshold": 0.9}]},
				{"org": "globex", "lines": [{"type": "noul", "threshold": 0.8}]}, {"org": "acme", "lines": [{"type": "choice", "threshold": 0.8}]}]}]}`,
			`pin "v": org "acme" given twice`},
		{"type given twice",
			"pin v {\n org acme {\n noul 0.9\n noul human\n }\n }",
			`{"pins": [{"version": "v", "orgs": [{"org": "acme", "lines": [{"type": "noul", "threshold": 0.9}, {"type": "noul", "human": true}]}]}]}`,
			`pin "v": org "acme": noul given twice`},
		{"type with neither",
			"pin v {\n org acme {\n noul\n }\n }",
			`{"pins": [{"version": "v", "orgs": [{"org": "acme", "lines": [{"type": "noul"}]}]}]}`,
			`pin "v": org "acme": noul needs a threshold or human`},
		{"human with a cert",
			"pin v {\n org acme {\n score human cert 0123456789abcdef\n }\n }",
			`{"pins": [{"version": "v", "orgs": [{"org": "acme", "lines": [{"type": "score", "human": true, "cert": "0123456789abcdef"}]}]}]}`,
			`pin "v": org "acme": score human takes no cert: nothing routes auto under it`},
		{"pin cert in upper case",
			"pin v {\n noul 0.9 cert 0123456789ABCDEF\n }",
			`{"pins": [{"version": "v", "noul": 0.9, "noul_cert": "0123456789ABCDEF"}]}`,
			`pin "v": noul cert "0123456789ABCDEF": a certificate id is 16 lowercase hex digits`},
		{"pin cert too short",
			"pin v {\n choice 0.9 cert 0123abc\n }",
			`{"pins": [{"version": "v", "choice": 0.9, "choice_cert": "0123abc"}]}`,
			`pin "v": choice cert "0123abc": a certificate id is 16 lowercase hex digits`},
		{"question cert too long",
			"pin v {\n question q1 0.9 cert 0123456789abcdef0\n }",
			`{"pins": [{"version": "v", "questions": {"q1": 0.9}, "question_certs": {"q1": "0123456789abcdef0"}}]}`,
			`pin "v": question "q1" cert "0123456789abcdef0": a certificate id is 16 lowercase hex digits`},
		{"org cert not hex",
			"pin v {\n org acme {\n noul 0.9 cert 0123456789abcdeg\n }\n }",
			`{"pins": [{"version": "v", "orgs": [{"org": "acme", "lines": [{"type": "noul", "threshold": 0.9, "cert": "0123456789abcdeg"}]}]}]}`,
			`pin "v": org "acme": noul cert "0123456789abcdeg": a certificate id is 16 lowercase hex digits`},
		{"org_fallback",
			"org_fallback maybe",
			`{"org_fallback": "maybe"}`,
			`org_fallback must be "pooled" or "human", not "maybe"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := adaptAndProvision(routeSite(tt.caddyfile))
			if err == nil || !strings.Contains(err.Error(), tt.want+", at Caddyfile:") {
				t.Errorf("Caddyfile: error %v, want %q at a file and line", err, tt.want)
			}
			err = caddy.Validate(routeJSON(tt.json))
			if err == nil || !strings.HasSuffix(err.Error(), ": "+tt.want) {
				t.Errorf("JSON: error %v, want one ending in %q", err, tt.want)
			}
		})
	}
}

// Mistakes in how a line is written are the parser's own, with the file
// and line.
func TestRouteOrgsSyntaxErrors(t *testing.T) {
	for lines, want := range map[string]string{
		"pin v {\n noul high\n }":                                 `threshold "high" is not a number, at Caddyfile:5`,
		"pin v {\n org acme {\n noul high\n }\n }":                `threshold "high" is not a number, at Caddyfile:6`,
		"pin v {\n noul 0.9 cert\n }":                             "wrong argument count or unexpected line ending after 'cert', at Caddyfile:5",
		"pin v {\n noul 0.9 certificate 0123456789abcdef\n }":     `a threshold line ends with cert <id> or nothing, not "certificate", at Caddyfile:5`,
		"pin v {\n question q 0.9 cert 0123456789abcdef more\n }": "wrong argument count or unexpected line ending after 'more', at Caddyfile:5",
		"pin v {\n org acme {\n choice human now\n }\n }":         `a threshold line ends with cert <id> or nothing, not "now", at Caddyfile:6`,
		"pin v {\n org acme more {\n noul 0.9\n }\n }":            "wrong argument count or unexpected line ending after 'more', at Caddyfile:5",
		"pin v {\n org {\n noul 0.9\n }\n }":                      "wrong argument count",
		"pin v {\n noul 0.5\n noul 0.6 cert 0123456789abcdef\n }": "duplicate noul, at Caddyfile:6",
		"org_fallback":              "wrong argument count or unexpected line ending after 'org_fallback', at Caddyfile:4",
		"org_fallback human pooled": "wrong argument count or unexpected line ending after 'pooled', at Caddyfile:4",
		"pin v {\n question q 0.5\n question q 0.6 cert 0123456789abcdef\n }": `question "q" has two thresholds in pin "v", at Caddyfile:6`,
	} {
		err := adaptAndProvision(routeSite(lines))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", lines, err, want)
		}
	}
}

// A route block with org blocks, org_fallback and certificates adapts to
// the JSON config they mean, placeholders in certificate ids resolved.
func TestRouteOrgsAdapt(t *testing.T) {
	t.Setenv("SYSTEMONE_TEST_CERT", "00000000000000ff")
	t.Setenv("SYSTEMONE_TEST_ORG", "globex")
	site := routeSite(`			pin service-1.0.0 {
				noul 0.8 cert 0123456789abcdef
				choice 0.6
				score 0.5 cert {env.SYSTEMONE_TEST_CERT}
				question legal_risk 0.95 cert fedcba9876543210
				question "a b" 0.9
				org acme {
					noul 0.9 cert 1111111111111111
					choice human
				}
				org "{env.SYSTEMONE_TEST_ORG}" {
					score 0.7
				}
			}
			org_fallback human`)
	got := adaptedRoute(t, site)
	f := func(v float64) *float64 { return &v }
	want := route.Config{
		OrgFallback: "human",
		Pins: []route.Pin{{
			Version: "service-1.0.0",
			Noul:    f(0.8), NoulCert: "0123456789abcdef",
			Choice: f(0.6),
			Score:  f(0.5), ScoreCert: "00000000000000ff",
			Questions:     map[string]float64{"legal_risk": 0.95, "a b": 0.9},
			QuestionCerts: map[string]string{"legal_risk": "fedcba9876543210"},
			Orgs: []route.OrgPin{
				{Org: "acme", Lines: []route.OrgLine{{Type: "noul", Threshold: f(0.9), Cert: "1111111111111111"}, {Type: "choice", Human: true}}},
				// Kept for the router to resolve, as a version is.
				{Org: "{env.SYSTEMONE_TEST_ORG}", Lines: []route.OrgLine{{Type: "score", Threshold: f(0.7)}}},
			},
		}},
	}
	if !reflect.DeepEqual(got, want) {
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		t.Errorf("adapted\n%s\nwant\n%s", gj, wj)
	}
	if err := adaptAndProvision(site); err != nil {
		t.Errorf("provisioning: %v", err)
	}
}

// adaptedRoute adapts a Caddyfile and returns its systemone handler's
// route config.
func adaptedRoute(t *testing.T, site string) route.Config {
	t.Helper()
	adapter := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}
	out, _, err := adapter.Adapt([]byte(site), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	handler := findHandler(doc, "systemone")
	if handler == nil {
		t.Fatalf("no systemone handler in %s", out)
	}
	raw, _ := json.Marshal(handler["route"])
	var cfg route.Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// findHandler returns the first JSON object under v whose "handler" is name.
func findHandler(v any, name string) map[string]any {
	switch v := v.(type) {
	case map[string]any:
		if v["handler"] == name {
			return v
		}
		for _, child := range v {
			if h := findHandler(child, name); h != nil {
				return h
			}
		}
	case []any:
		for _, child := range v {
			if h := findHandler(child, name); h != nil {
				return h
			}
		}
	}
	return nil
}
