package calibrate

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
)

// docBlocks returns the fenced blocks of docs/active-audit.md in language
// lang.
func docBlocks(t *testing.T, lang string) []string {
	t.Helper()
	doc, err := os.ReadFile("../../../docs/active-audit.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatalf("no %s block in docs/active-audit.md", lang)
	}
	return out
}

// The documented /labels line reads as a line of the active audit.
func TestDocLabelsLine(t *testing.T) {
	lines, err := ReadLines(strings.NewReader(docBlocks(t, "json")[0]))
	if err != nil || len(lines) != 1 {
		t.Fatalf("%v %v", lines, err)
	}
	if d := lines[0].Draw; d != (Draw{P: 0.1, HasP: true, Active: true, Floor: 0.01, From: 0.6}) {
		t.Errorf("draw %+v", d)
	}
}

// The documented command runs as shown, against a /labels endpoint behind
// basic auth serving lines of the documented active audit.
func TestDocCalibrateCommand(t *testing.T) {
	cmdline := strings.TrimSpace(docBlocks(t, "sh")[0])
	args := strings.Fields(cmdline)
	if len(args) < 3 || args[0] != "systemone-gateway" || args[1] != "calibrate" {
		t.Fatalf("command %q", cmdline)
	}
	args = args[2:]

	d := design{share: 0.1, floor: 0.01, from: 0.6}
	g := logisticCurve.grid()
	r := rand.New(rand.NewPCG(11, 12))
	var body strings.Builder
	for i, l := range g.traffic(r, d, 1500, nil) {
		line := map[string]any{"entry": fmt.Sprintf("1764000000000-%d", i), "model": "service-1.0.0", "type": "noul", "question": "late",
			"confidence": l.Confidence, "agree": l.Agree, "audit": true, "audit_p": l.Draw.P, "audit_floor": l.Draw.Floor, "audit_from": l.Draw.From}
		b, _ := json.Marshal(line)
		body.Write(append(b, '\n'))
	}
	srv := labelsServer(t, body.String())
	url := args[len(args)-1]
	if !strings.HasPrefix(url, "https://ann:secret@gateway.example/") {
		t.Fatalf("URL %q", url)
	}
	args[len(args)-1] = strings.Replace(url, "https://ann:secret@gateway.example", strings.Replace(srv.URL, "http://", "http://ann:secret@", 1), 1)

	out, _, err := runCommand(t, nil, args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if !strings.Contains(out, "pin service-1.0.0 {") || !strings.Contains(out, "noul ") {
		t.Errorf("no threshold for the documented command:\n%s", out)
	}
	// Without the flag, the same lines are refused, pointing at it.
	plain := append([]string{}, args...)
	for i, a := range plain {
		if a == "--method" {
			plain = append(plain[:i], plain[i+2:]...)
			break
		}
	}
	if _, _, err := runCommand(t, nil, plain...); err == nil || !strings.Contains(err.Error(), "--method weighted") {
		t.Errorf("uniform method on the active audit's lines: %v", err)
	}
}

// labelsServer serves labels as the review API's /labels at
// /review/labels, behind basic auth for the user ann, password secret, as
// the docs' $REVIEW has it; closed when the test ends.
func labelsServer(t *testing.T, labels string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); !ok || u != "ann" || p != "secret" || req.URL.Path != "/review/labels" {
			http.Error(w, `{"detail":"no"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = w.Write([]byte(labels))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// LabelsServer is labelsServer, for the package's external tests.
var LabelsServer = labelsServer
