package calibrate_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/systemone/systemone-gateway" // the systemone directive
	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/review/calibrate"
	"github.com/systemone/systemone-gateway/policy/route"
)

// adaptPins pastes a fragment into a systemone block, adapts the Caddyfile
// with the real modules, and returns the route pins of the JSON config.
func adaptPins(t *testing.T, fragment string) []map[string]any {
	t.Helper()
	var cfg struct {
		Pins []map[string]any `json:"pins"`
	}
	if err := json.Unmarshal(adaptRoute(t, fragment, false), &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg.Pins
}

// adaptRoute adapts a Caddyfile whose systemone block holds fragment and
// returns the JSON of its route config. Caddy's only warning, that the
// input is not formatted, is accepted when unformatted is set (a fragment
// pasted unindented, as one with multi-line ids must be).
func adaptRoute(t *testing.T, fragment string, unformatted bool) json.RawMessage {
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
	for _, w := range warnings {
		if !unformatted || !strings.Contains(w.Message, "not formatted") {
			t.Errorf("warning: %v", w)
		}
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
					Handler string          `json:"handler"`
					Route   json.RawMessage `json:"route"`
				}
				if err := json.Unmarshal(h, &handler); err != nil {
					t.Fatal(err)
				}
				if handler.Handler == "systemone" {
					return handler.Route
				}
			}
		}
	}
	t.Fatalf("no systemone handler in %s", out)
	return nil
}

// router makes the gateway's Router from an adapted route config, as the
// module does when it provisions (placeholders in versions and ids
// resolved then).
func router(t *testing.T, raw json.RawMessage) *route.Router {
	t.Helper()
	var cfg route.Config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	r, err := route.New(cfg, nil, "", nil)
	if err != nil {
		t.Fatalf("route.New: %v", err)
	}
	return r
}

// thresholdOf is the threshold the gateway applies to a choice question id
// answered by version.
func thresholdOf(r *route.Router, version, id string) (float64, bool) {
	d := r.Decide([]evaluation.Question{{ID: id, Type: evaluation.TypeChoice}}, &evaluation.Response{Model: version}, route.Signal{})
	return d.Questions[0].Threshold, d.Questions[0].HasThreshold
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
	raw := adaptRoute(t, indent(fragment), false)
	var cfg struct {
		Pins []map[string]any `json:"pins"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	pins := cfg.Pins

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
	// The ids as the gateway reads them, placeholders resolved.
	r := router(t, raw)
	for i, id := range odd {
		want, _ := strconv.ParseFloat(calibrate.FormatThreshold(0.5+float64(i)/100+0.00001), 64)
		if got, ok := thresholdOf(r, "service-1.0.0", id); !ok || got != want {
			t.Errorf("question %q: threshold %v (%v), want %v", id, got, ok, want)
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

// TestFragmentRoundTrip is the paste-safety property: for random question
// ids and versions, built from the pieces each reader of a Caddyfile treats
// specially (environment variables, placeholders and their shorthands,
// quotes, backticks, backslashes, comments, heredoc markers, braces, line
// breaks), the fragment adapts through the real Caddyfile adapter and the
// gateway's route config to a threshold on exactly that id under exactly
// that version, or the id is refused with a comment saying so. Only ids
// that no Caddyfile token can hold may be refused.
func TestFragmentRoundTrip(t *testing.T) {
	t.Setenv("SYSTEMONE_ROUNDTRIP", "expanded") // {$SYSTEMONE_ROUNDTRIP} would read as this
	pieces := []string{
		"{", "}", "$", "{$SYSTEMONE_ROUNDTRIP}", "{$HOME}", "{env.HOME}", "{env.SYSTEMONE_ROUNDTRIP}",
		"{file./etc/hostname}", "{host}", "{header.X-Y}", "{query.q}", "{re.a.b}", "{}", "{$}",
		`\`, `\{`, `\}`, `\"`, `"`, "`", "#", " ", "\t", "\n", "\r", "<<", "<<EOF\n", "EOF", "ID",
		"a", "b9", "类别", "-", "=", "%", ".", "{{", "}}", "\\\\", "<", ">", ";", "'", "ID1",
	}
	rng := rand.New(rand.NewPCG(23, 5))
	refused, written, heredocs := 0, 0, 0
	for round := range 40 {
		seen := map[string]bool{}
		res := calibrate.Result{Target: 0.9, Delta: 0.05}
		version := "service-1.0.0"
		if round%4 == 3 {
			version = randomID(rng, pieces) // versions go through the same readers
		}
		var ids []string
		for len(ids) < 25 {
			id := randomID(rng, pieces)
			if seen[id] {
				continue
			}
			seen[id] = true
			ids = append(ids, id)
			th := 0.5 + float64(len(ids))/1000
			res.Groups = append(res.Groups, calibrate.Group{Model: version, Type: "choice", Question: id, Labels: 50, N: 50, Agree: 50, Threshold: th, HasThreshold: true})
		}
		slices.SortFunc(res.Groups, func(a, b calibrate.Group) int { return strings.Compare(a.Question, b.Question) })
		var buf bytes.Buffer
		if err := calibrate.WriteFragment(&buf, res); err != nil {
			t.Fatal(err)
		}
		fragment := buf.String()
		if strings.Contains(fragment, "{$") {
			t.Fatalf("the fragment holds {$, which the Caddyfile substitutes:\n%s", fragment)
		}
		heredocs += strings.Count(fragment, " <<ID")
		if strings.Contains(fragment, "# version") {
			continue // the version itself cannot be written: nothing to adapt
		}
		r := router(t, adaptRoute(t, fragment, true))
		for _, g := range res.Groups {
			got, ok := thresholdOf(r, version, g.Question)
			cannot := g.Question == "" || strings.Contains(g.Question, "`") && strings.Contains(g.Question, "\r") &&
				(strings.Contains(escapedForQuotes(g.Question), `\"`) || strings.HasSuffix(g.Question, `\`))
			switch {
			case cannot:
				refused++
				if ok || !strings.Contains(fragment, "no Caddyfile token can hold this id") {
					t.Errorf("id %q cannot be written, but the fragment:\n%s", g.Question, fragment)
				}
			case !ok:
				t.Errorf("id %q (version %q): no threshold after adapting:\n%s", g.Question, version, fragment)
			default:
				written++
				want, _ := strconv.ParseFloat(calibrate.FormatThreshold(g.Threshold), 64)
				if got != want {
					t.Errorf("id %q: threshold %v, want %v", g.Question, got, want)
				}
			}
		}
	}
	t.Logf("%d ids written and read back (%d in heredocs), %d refused", written, heredocs, refused)
	if written < 500 || heredocs == 0 {
		t.Errorf("only %d ids round-tripped, %d of them in heredocs", written, heredocs)
	}
}

// escapedForQuotes is an id with its braces escaped, as the fragment writes
// it before quoting: what decides whether double quotes can hold it.
func escapedForQuotes(s string) string {
	return strings.NewReplacer("{", `\{`, "}", `\}`).Replace(s)
}

func randomID(rng *rand.Rand, pieces []string) string {
	var b strings.Builder
	for range 1 + rng.IntN(5) {
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return b.String()
}
