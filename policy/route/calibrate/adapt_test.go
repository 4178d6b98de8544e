package calibrate_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/systemone/systemone-gateway" // the systemone directive
	"github.com/systemone/systemone-gateway/policy/route/calibrate"
)

// adaptPins pastes a fragment into a systemone block, adapts the Caddyfile
// with the real modules, and returns the route pins of the JSON config.
func adaptPins(t *testing.T, fragment string) []map[string]any {
	t.Helper()
	caddyfile := ":8080 {\n\tsystemone {\n" + fragment + "\t}\n\treverse_proxy localhost:9\n}\n"
	adapter := caddyconfig.GetAdapter("caddyfile")
	if adapter == nil {
		t.Fatal("no caddyfile adapter")
	}
	out, warnings, err := adapter.Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapting:\n%s\n%v", caddyfile, err)
	}
	if len(warnings) > 0 {
		t.Errorf("warnings: %v", warnings)
	}
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes []struct {
						Handle []json.RawMessage `json:"handle"`
					} `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, srv := range cfg.Apps.HTTP.Servers {
		for _, r := range srv.Routes {
			for _, h := range r.Handle {
				var handler struct {
					Handler string `json:"handler"`
					Route   struct {
						Pins []map[string]any `json:"pins"`
					} `json:"route"`
				}
				if err := json.Unmarshal(h, &handler); err != nil {
					t.Fatal(err)
				}
				if handler.Handler == "systemone" {
					return handler.Route.Pins
				}
			}
		}
	}
	t.Fatalf("no systemone handler in %s", out)
	return nil
}

// TestFragmentAdapts writes the fragment of a result with every kind of
// group and odd versions and ids, pastes it into a Caddyfile and checks
// that Caddy reads back each version, id and rounded-up threshold.
func TestFragmentAdapts(t *testing.T) {
	odd := []string{
		"refund, eligible", `say "hi"`, `back\slash`, "#hash", "{", "}", "<<EOF",
		"line\nbreak", `ends\`, `q\"x`, "类别", "{env.HOME}", "tab\there", "pin", "question",
	}
	res := calibrate.Result{Target: 0.9, Delta: 0.05}
	add := func(model, typ, question string, threshold float64, ok bool) {
		res.Groups = append(res.Groups, calibrate.Group{Model: model, Type: typ, Question: question, Labels: 100, N: 50, Agree: 50, Threshold: threshold, HasThreshold: ok})
	}
	// Thresholds that rounding must get right: 0.95 stays, 0.123456 goes up.
	add("service-1.0.0", "noul", "", 0.95, true)
	add("service-1.0.0", "choice", "", 0, false) // left out
	add("service-1.0.0", "score", "", 0.123456, true)
	for i, id := range odd {
		add("service-1.0.0", "choice", id, 0.5+float64(i)/100+0.00001, true)
	}
	add("service-1.0.0", "score", "no threshold", 0, false)
	add("service 2.0 beta", "noul", "", 0.3999999999999999, true) // a version that needs quotes
	add("service-3.0.0", "noul", "", 0, false)                    // an empty pin

	var buf bytes.Buffer
	if err := calibrate.WriteFragment(&buf, res); err != nil {
		t.Fatal(err)
	}
	fragment := buf.String()
	t.Logf("fragment:\n%s", fragment)
	pins := adaptPins(t, indent(fragment))

	byVersion := map[string]map[string]any{}
	for _, p := range pins {
		byVersion[p["version"].(string)] = p
	}
	if len(byVersion) != 3 {
		t.Fatalf("pins: %v", pins)
	}
	p := byVersion["service-1.0.0"]
	if p["noul"] != 0.95 || p["score"] != 0.1235 || p["choice"] != nil {
		t.Errorf("service-1.0.0 type thresholds: noul %v score %v choice %v", p["noul"], p["score"], p["choice"])
	}
	questions, _ := p["questions"].(map[string]any)
	if len(questions) != len(odd) {
		t.Errorf("questions: %v", questions)
	}
	for i, id := range odd {
		want, _ := strconv.ParseFloat(calibrate.FormatThreshold(0.5+float64(i)/100+0.00001), 64)
		if got := questions[id]; got != want {
			t.Errorf("question %q: threshold %v, want %v", id, got, want)
		}
	}
	if p := byVersion["service 2.0 beta"]; p["noul"] != 0.4 {
		t.Errorf("quoted version: %v", p)
	}
	if p := byVersion["service-3.0.0"]; len(p) != 1 {
		t.Errorf("a version without thresholds should be an empty pin: %v", p)
	}
}

// TestGoldenFragmentAdapts adapts the fragments of the golden outputs: the
// lines from "route {" on are what an operator pastes.
func TestGoldenFragmentAdapts(t *testing.T) {
	for _, file := range []string{"table.golden", "by_question.golden", "defaults.golden"} {
		t.Run(file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			_, fragment, ok := strings.Cut(string(data), "\nroute {\n")
			if !ok {
				t.Fatal("no fragment")
			}
			pins := adaptPins(t, indent("route {\n"+fragment))
			if len(pins) != 2 || pins[0]["version"] != "service-1.0.0" {
				t.Errorf("pins: %v", pins)
			}
		})
	}
}

// indent nests the fragment in the systemone block, as an operator pasting
// it would, so that the Caddyfile is formatted (Caddy warns otherwise). The
// continuation of a quoted id with a newline is left alone: it is part of
// the id.
func indent(fragment string) string {
	lines := strings.SplitAfter(fragment, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "route {") || strings.HasPrefix(l, "}") {
			lines[i] = "\t\t" + l
		}
	}
	return strings.Join(lines, "")
}
