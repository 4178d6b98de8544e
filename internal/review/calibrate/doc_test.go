package calibrate_test

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/internal/review/calibrate"
)

// docExample is the labels of docs/calibration.md's example: 300 audited
// noul answers, one per entry, their confidences the steps of 1/300 in a
// shuffled order (as traffic comes), two in three of the lowest fifty wrong; 20 choice
// answers, one wrong.
func docExample() string {
	var b strings.Builder
	for i := range 300 {
		step := (i * 37) % 300
		fmt.Fprintf(&b, `{"entry":"1764000000000-%d","request_id":"n%d","model":"service-1.0.0","type":"noul","question":"late","confidence":%v,"agree":%v,"audit":true}`+"\n",
			i, i, float64(300-step)/300, step < 250 || step%3 == 0)
	}
	for i := range 20 {
		fmt.Fprintf(&b, `{"entry":"1764000000000-%d","request_id":"c%d","model":"service-1.0.0","type":"choice","question":"kind","confidence":%v,"agree":%v,"audit":true}`+"\n",
			400+i, i, 0.5+float64(i)/40, i != 7)
	}
	return b.String()
}

// TestDocExample: the output docs/calibration.md shows is the command's.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/calibration.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```\n(target .*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("no example output in docs/calibration.md")
	}
	in := docExample()
	lines, err := calibrate.ReadLines(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	opts := calibrate.DefaultOptions()
	opts.Target, opts.MaxQuestions = 0.9, 1
	res, err := calibrate.Calibrate(lines, opts)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := calibrate.WriteTable(&out, res); err != nil {
		t.Fatal(err)
	}
	out.WriteString("\n")
	if err := calibrate.WriteFragment(&out, res); err != nil {
		t.Fatal(err)
	}
	if out.String() != string(m[1]) {
		t.Errorf("docs/calibration.md shows:\n%s\nthe command prints:\n%s", m[1], out.String())
	}
}

// TestDocFragments adapts the Caddyfile blocks docs/calibration.md shows:
// the paste-safe question line reads back as its id, and the route block
// with include_content adapts.
func TestDocFragments(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/calibration.md")
	if err != nil {
		t.Fatal(err)
	}
	var question, routeBlock, orgBlock string
	for _, b := range fencedBlocks(string(doc)) {
		s := strings.TrimSpace(b)
		switch {
		case strings.HasPrefix(s, "question "):
			question = s
		case strings.HasPrefix(s, "route {") && strings.Contains(s, "include_content"):
			routeBlock = s
		case strings.HasPrefix(s, "route {") && strings.Contains(s, "org "):
			orgBlock = s
		}
	}
	if orgBlock == "" {
		t.Fatal("the per-organization block is not found")
	}
	raw := adaptRoute(t, "\t\t"+strings.ReplaceAll(orgBlock, "\n", "\n\t\t")+"\n", false)
	for _, want := range []string{`"org":"acme"`, `"7e1f0a3c9b2d4e68"`, `"org":"hardco"`, `"human":true`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("the per-organization block adapted to %s, without %s", raw, want)
		}
	}
	if question == "" || routeBlock == "" {
		t.Fatalf("blocks not found: %q %q", question, routeBlock)
	}
	r := router(t, adaptRoute(t, "\t\troute {\n\t\t\tpin service-1.0.0 {\n\t\t\t\t"+question+"\n\t\t\t}\n\t\t}\n", false))
	if th, ok := thresholdOf(r, "service-1.0.0", `{env.HOME} "late"`); !ok || th != 0.8 {
		t.Errorf("%s: threshold %v %v for the id {env.HOME} \"late\"", question, th, ok)
	}
	raw = adaptRoute(t, "\t\t"+strings.ReplaceAll(routeBlock, "\n", "\n\t\t")+"\n", false)
	if !strings.Contains(string(raw), `"include_content":true`) || !strings.Contains(string(raw), `"audit":0.05`) {
		t.Errorf("route block adapted to %s", raw)
	}
}

// fencedBlocks returns the contents of the plain ``` blocks of a markdown
// text (not ```sh), with the indent of their fence taken off each line.
func fencedBlocks(doc string) []string {
	var out []string
	var cur []string
	in, plain, indent := false, false, ""
	for _, line := range strings.Split(doc, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if strings.HasPrefix(trimmed, "```") {
			if in {
				if plain {
					out = append(out, strings.Join(cur, "\n"))
				}
				in, cur = false, nil
				continue
			}
			in, plain, indent = true, trimmed == "```", line[:len(line)-len(trimmed)]
			continue
		}
		if in {
			cur = append(cur, strings.TrimPrefix(line, indent))
		}
	}
	return out
}
