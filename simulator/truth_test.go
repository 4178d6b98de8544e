package simulator

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// TestVersionCurves checks each version's confidence-to-agreement curve
// against the truth: over many questions, the agreement observed in each
// confidence band is the mean of Agreement over the band's answers, within
// 4 standard errors. service-1.0.0 and service-2.0.0 follow their curves
// (service-2.0.0's scores at most theirs, see truth.go), and differ.
func TestVersionCurves(t *testing.T) {
	const n = 1500
	type band struct {
		answers       int
		agree, expect float64
		variance      float64
	}
	for _, typ := range []string{typeNoul, typeChoice, typeScore} {
		for _, version := range []string{DefaultVersion, SecondVersion, "service-3.1.4"} {
			if typ == typeScore && version == "service-3.1.4" {
				continue // a random mean agrees with a tier more often than 1/n: no curve to check
			}
			bands := make([]band, 5)
			for i := range n {
				body := fmt.Sprintf(`{"state":"case %d","questions":{"q":%s}}`, i, questionOf(typ))
				e, err := parseEvaluation([]byte(body))
				if err != nil {
					t.Fatal(err)
				}
				var answers map[string]json.RawMessage
				if err := json.Unmarshal(e.answers(version, nil), &answers); err != nil {
					t.Fatal(err)
				}
				truth, err := Truth([]byte(body))
				if err != nil {
					t.Fatal(err)
				}
				c, agree, chance := judge(t, typ, answers["q"], truth["q"])
				b := &bands[min(int(c*5), 4)]
				p := Agreement(version, c, chance)
				b.answers++
				b.expect += p
				b.variance += p * (1 - p)
				if agree {
					b.agree++
				}
			}
			for i, b := range bands {
				if b.answers < 50 {
					continue
				}
				tol := 4*math.Sqrt(b.variance)/float64(b.answers) + 1e-9
				got, want := b.agree/float64(b.answers), b.expect/float64(b.answers)
				low := typ == typeScore && version == SecondVersion // a flat distribution's mean strays
				if got > want+tol || (!low && got < want-tol) {
					t.Errorf("%s %s confidence [%.1f, %.1f): agreement %.4f over %d answers, the curve says %.4f (tolerance %.4f)",
						version, typ, float64(i)/5, float64(i+1)/5, got, b.answers, want, tol)
				}
			}
		}
	}
	// The curves differ where it matters: at confidence 0.8, a noul answer
	// of service-1.0.0 agrees 98% of the time, service-2.0.0's 90%.
	if a, b := Agreement(DefaultVersion, 0.8, 0.5), Agreement(SecondVersion, 0.8, 0.5); math.Abs(a-0.98) > 1e-12 || math.Abs(b-0.9) > 1e-12 {
		t.Errorf("Agreement at 0.8: %v and %v", a, b)
	}
}

func questionOf(typ string) string {
	switch typ {
	case typeChoice:
		return `{"type":"choice","instructions":"Which?","criteria":{"a":null,"b":null,"c":null}}`
	case typeScore:
		return `{"type":"score","instructions":"How good?","criteria":["bad","ok","good","great"]}`
	}
	return `{"type":"noul","instructions":"Is it?"}`
}

// judge reads an answer as the gateway does: its confidence, whether it
// agrees with the label (the contract's rule), and the chance agreement.
func judge(t *testing.T, typ string, raw json.RawMessage, label any) (c float64, agree bool, chance float64) {
	var a struct {
		Noul, Score, Confidence float64
		Choice                  string
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatal(err)
	}
	switch typ {
	case typeNoul:
		return math.Abs(2*a.Noul - 1), label.(bool) == (a.Noul >= 0.5), 0.5
	case typeChoice:
		return a.Confidence, label.(string) == a.Choice, 1.0 / 3
	}
	return a.Confidence, math.Abs(float64(label.(int))-a.Score) <= 0.5, 0.25
}

// TestTruth: the truth depends on the content only: not on the version
// asked, nor on insignificant white space (the review API stores requests
// compacted), nor on the order of the other questions; it changes with
// the state.
func TestTruth(t *testing.T) {
	body := `{"model":"service-1.0.0","state":"the parcel","questions":{"a":{"type":"noul","instructions":"Late?"},"b":` + questionOf(typeChoice) + `,"c":` + questionOf(typeScore) + `}}`
	spaced := strings.NewReplacer(`,"`, `, "`, `":`, `": `).Replace(body)
	moved := `{"questions":{"c":` + questionOf(typeScore) + `,"b":` + questionOf(typeChoice) + `,"a":{"type":"noul","instructions":"Late?"}},"state":"the parcel","model":"service-9.9.9"}`
	want, err := Truth([]byte(body))
	if err != nil || len(want) != 3 {
		t.Fatalf("Truth: %v %v", want, err)
	}
	for _, other := range []string{spaced, moved} {
		got, err := Truth([]byte(other))
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Truth(%s) = %v, want %v", other, got, want)
		}
	}
	if _, ok := want["a"].(bool); !ok {
		t.Errorf("noul truth %T", want["a"])
	}
	if _, ok := want["c"].(int); !ok {
		t.Errorf("score truth %T", want["c"])
	}
	changed := 0
	for i := range 20 {
		got, _ := Truth([]byte(strings.Replace(body, "the parcel", fmt.Sprint("parcel ", i), 1)))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			changed++
		}
	}
	if changed == 0 {
		t.Error("the truth does not depend on the state")
	}
	if _, err := Truth([]byte(`{"state":"x","questions":{"q":{"type":"choice","instructions":"x","criteria":{}}}}`)); err == nil {
		t.Error("Truth of a choice without options: want an error")
	}
}

// TestSecondVersionServed: service-2.0.0 is asked by name, or through an
// alias with X-Simulator-Version; white space in the request does not
// change its answer.
func TestSecondVersionServed(t *testing.T) {
	h, err := New(Handler{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ask := func(body string, header ...string) map[string]any {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/systemone", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&out) != nil {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return out
	}
	body := `{"model":"service-2.0.0","state":"s","questions":{"q":{"type":"noul","instructions":"Is it?"}}}`
	a := ask(body)
	b := ask(strings.ReplaceAll(body, `":`, `": `))
	c := ask(strings.Replace(body, "service-2.0.0", "service-preview", 1), "X-Simulator-Version", SecondVersion)
	if a["model"] != SecondVersion || fmt.Sprint(a["answers"]) != fmt.Sprint(b["answers"]) || fmt.Sprint(a["answers"]) != fmt.Sprint(c["answers"]) || c["model"] != SecondVersion {
		t.Errorf("answers %v, %v, %v", a, b, c)
	}
}

// TestDocConfig adapts docs/simulator.md's Caddyfile: the simulator as
// service-2.0.0.
func TestDocConfig(t *testing.T) {
	doc, err := os.ReadFile("../docs/simulator.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```caddyfile\n(:9080 .*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("no Caddyfile in docs/simulator.md")
	}
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(m[1], map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"handler":"systemone_simulator","version":"service-2.0.0"`) {
		t.Errorf("adapted to %s", out)
	}
}
