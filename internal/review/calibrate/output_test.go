package calibrate

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/systemone/systemone-gateway/internal/cli"
)

var update = flag.Bool("update", false, "rewrite the golden files with the current output")

func TestFormatThreshold(t *testing.T) {
	for _, tt := range []struct {
		t    float64
		want string
	}{
		{0.95, "0.95"}, // the float64 nearest 0.95 is 0.94999999999999995559...: not 0.9501
		{0.58, "0.58"}, // 0.58 * 10000 = 5799.999999999999 in float64: not 0.5799
		{0.5801, "0.5801"},
		{0.1234, "0.1234"},
		{0.12341, "0.1235"},
		{0.12345, "0.1235"},
		{0.9500000000000001, "0.9501"}, // a hair above 0.95: up
		{0.3999999999999999, "0.4"},    // 2*0.7 - 1 in float64
		{0.99995, "1"},
		{0.99991, "1"},
		{0.99981, "0.9999"},
		{1, "1"},
		{0, "0"},
		{1e-7, "0.0001"},
		{0.00005, "0.0001"},
		{0.8, "0.8"},
	} {
		if got := FormatThreshold(tt.t); got != tt.want {
			t.Errorf("FormatThreshold(%v) = %s, want %s", tt.t, got, tt.want)
		}
	}
	// Every 4-decimal value is written as itself.
	for i := 0; i <= 10000; i++ {
		s := strings.TrimSuffix(strings.TrimRight(strconv.FormatFloat(float64(i)/10000, 'f', 4, 64), "0"), ".")
		v, _ := strconv.ParseFloat(s, 64)
		if got := FormatThreshold(v); got != s {
			t.Fatalf("FormatThreshold(%v) = %s, want %s", v, got, s)
		}
	}
	// Any value: at most 4 decimals, never below it, less than 0.0001 above.
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		v := r.Float64()
		s := FormatThreshold(v)
		got, err := strconv.ParseFloat(s, 64)
		_, frac, _ := strings.Cut(s, ".")
		if err != nil || got < v || got-v >= 1e-4 || len(frac) > 4 {
			t.Fatalf("FormatThreshold(%v) = %s", v, s)
		}
	}
}

func TestCaddyfileToken(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{"is_safe", "is_safe", true},
		{"service-1.0.0", "service-1.0.0", true},
		{"类别", "类别", true},
		{"mentions refund?", `"mentions refund?"`, true},
		{`say "hi"`, `"say \"hi\""`, true},
		{`a\b`, `"a\b"`, true},
		{"#tag", `"#tag"`, true},
		{"{", `"\{"`, true},
		{"{env.HOME}", `"\{env.HOME\}"`, true},
		{"{host}", `"\{host\}"`, true},
		{`\{`, `"\\{"`, true},
		{"<<EOF", `"<<EOF"`, true},
		{"line\nbreak", "\"line\nbreak\"", true},
		{`ends\`, "`ends\\`", true},
		{`q\"x`, "`q\\\"x`", true},
		{"`tick` \\", "<<ID\n`tick` \\\nID", true},
		{"ID `tick` \\", "<<ID1\nID `tick` \\\nID1", true},
		{"`tick`\r\\", "", false},
		{"a{$HOME}", `"a\{{}$HOME\}"`, true},
		{"", "", false},
	} {
		got, ok := caddyfileToken(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("caddyfileToken(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// runCommand runs the calibrate command as Caddy's CLI would set it up,
// with the given standard input.
func runCommand(t testing.TB, stdin io.Reader, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := &cobra.Command{Use: "calibrate", SilenceUsage: true, SilenceErrors: true}
	setUp(cmd)
	var out, errb bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetIn(stdin)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	err = cmd.Execute()
	return out.String(), errb.String(), err
}

// TestGolden runs the command over testdata/labels.ndjson (268 lines made
// by a seeded generator: two versions, three types, 15 lines not audited,
// 3 answers the gateway could not read) and compares its output.
func TestGolden(t *testing.T) {
	for _, tt := range []struct {
		golden string
		args   []string
	}{
		{"table.golden", []string{"--target", "0.9", "--delta", "0.1", "--method", "uniform"}},
		{"by_question.golden", []string{"--target", "0.9", "--delta", "0.1", "--method", "uniform", "--by", "question", "--min-labels", "25"}},
		{"json.golden", []string{"--target", "0.9", "--delta", "0.1", "--method", "uniform", "--by", "question", "--min-labels", "25", "--json"}},
		{"defaults.golden", []string{"--target", "0.95"}},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			out, stderr, err := runCommand(t, nil, append(tt.args, "testdata/labels.ndjson")...)
			if err != nil || stderr != "" {
				t.Fatalf("err %v, stderr %q", err, stderr)
			}
			file := filepath.Join("testdata", tt.golden)
			if *update {
				if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if out != string(want) {
				t.Errorf("output:\n%s\nwant (%s):\n%s", out, file, want)
			}
		})
	}
}

func TestJSONShape(t *testing.T) {
	out, _, err := runCommand(t, nil, "--target", "0.9", "--delta", "0.1", "--by", "question", "--min-labels", "25", "--json", "testdata/labels.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if got := keys(doc); got != "delta groups ignored method since target" {
		t.Errorf("document fields: %s", got)
	}
	var groups []map[string]any
	if err := json.Unmarshal(doc["groups"], &groups); err != nil {
		t.Fatal(err)
	}
	nulls := 0
	for _, g := range groups {
		if got := keys(g); got != "agree bins complete_through coverage entries in_force labels labels_expected labels_needed late_corrections lower_bound model n org question refused threshold type waiting waiting_on" {
			t.Errorf("group fields: %s", got)
		}
		if g["threshold"] == nil {
			nulls++
			if g["coverage"] != 0.0 {
				t.Errorf("group without a threshold has coverage %v", g["coverage"])
			}
		}
	}
	if nulls == 0 || nulls == len(groups) {
		t.Errorf("%d of %d groups without a threshold: the golden data should have both", nulls, len(groups))
	}
	// Unrounded: the JSON threshold is a confidence from the data; the table
	// writes the rounded-up one.
	res, _ := Calibrate([]Line{l(0.123456, true)}, Options{Target: 0.5, Delta: 0.5, By: ByType, MinLabels: 1, Method: MethodUniform})
	var buf bytes.Buffer
	if err := WriteJSON(&buf, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"threshold": 0.123456`) {
		t.Errorf("JSON threshold rounded: %s", buf.String())
	}
}

func keys[V any](m map[string]V) string {
	return strings.Join(slices.Sorted(maps.Keys(m)), " ")
}

func TestTableQuotesOddIds(t *testing.T) {
	lines := []Line{
		{Model: "m", Type: "noul", Question: "two\twords", Confidence: 1, HasConfidence: true, Agree: true, Audit: true},
		{Model: "m", Type: "noul", Question: "-", Confidence: 1, HasConfidence: true, Agree: true, Audit: true},
	}
	res, err := Calibrate(lines, Options{Target: 0.5, Delta: 0.5, By: ByQuestion, MinLabels: 1, Method: MethodUniform})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, res); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); !strings.Contains(s, `"two\twords"`) || !strings.Contains(s, `"-"`) {
		t.Errorf("table:\n%s", s)
	}
}

func TestFragmentUnwritable(t *testing.T) {
	res := Result{Groups: []Group{
		{Model: "", Type: "noul", Labels: 1, Threshold: 0.5, HasThreshold: true},
		{Model: "m", Type: "noul", Question: "x`{$HOME}\r\\", Labels: 1, Threshold: 0.5, HasThreshold: true},
	}}
	var buf bytes.Buffer
	if err := WriteFragment(&buf, res); err != nil {
		t.Fatal(err)
	}
	want := "route {\n" +
		"\t# version \"\": no Caddyfile token can hold it; pin it in the JSON config\n" +
		"\tpin m {\n" +
		"\t\t# question \"x`{\\u0024HOME}\\r\\\\\" 0.5: no Caddyfile token can hold this id; set it in the JSON config\n" +
		"\t}\n" +
		"}\n"
	if buf.String() != want {
		t.Errorf("fragment:\n%s\nwant:\n%s", buf.String(), want)
	}
	buf.Reset()
	if err := WriteFragment(&buf, Result{}); err != nil || buf.Len() != 0 {
		t.Errorf("no groups: %q, %v", buf.String(), err)
	}
}

func TestCommandErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"testdata/labels.ndjson"}, "--target is required"},
		{[]string{"--target", "0.9"}, "want one <labels> argument"},
		{[]string{"--target", "0.9", "a", "b"}, "want one <labels> argument"},
		{[]string{"--target", "1", "testdata/labels.ndjson"}, "--target 1 is not between 0 and 1"},
		{[]string{"--target", "0", "testdata/labels.ndjson"}, "--target 0 is not between 0 and 1"},
		{[]string{"--target", "-0.5", "testdata/labels.ndjson"}, "--target -0.5 is not between 0 and 1"},
		{[]string{"--target", "0.9", "--delta", "0", "testdata/labels.ndjson"}, "--delta 0 is not between 0 and 1"},
		{[]string{"--target", "0.9", "--delta", "1.5", "testdata/labels.ndjson"}, "--delta 1.5 is not between 0 and 1"},
		{[]string{"--target", "0.9", "--by", "model", "testdata/labels.ndjson"}, `--by "model" is not "type", "question" or "org"`},
		{[]string{"--target", "0.9", "--min-labels", "0", "testdata/labels.ndjson"}, "--min-labels 0 is less than 1"},
		{[]string{"--target", "high", "testdata/labels.ndjson"}, `invalid argument "high" for "--target"`},
		{[]string{"--target", "0.9", "testdata/missing.ndjson"}, "testdata/missing.ndjson: no such file"},
		// Options are checked before the labels are read.
		{[]string{"--target", "2", "testdata/missing.ndjson"}, "--target 2 is not between 0 and 1"},
	} {
		_, stderr, err := runCommand(t, nil, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("calibrate %s: error %v, want %q", strings.Join(tt.args, " "), err, tt.want)
		}
		// One plain line on standard error, and the exit status: 1 for a
		// source that cannot be read, 2 for a wrong command line.
		status := cli.StatusUsage
		if strings.Contains(tt.want, "no such file") {
			status = cli.StatusFailure
		}
		if got := cli.Status(err); got != status {
			t.Errorf("calibrate %s: exit status %d, want %d", strings.Join(tt.args, " "), got, status)
		}
		if !strings.HasPrefix(stderr, "systemone-gateway calibrate: ") || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tt.want) {
			t.Errorf("calibrate %s: standard error %q, want one line", strings.Join(tt.args, " "), stderr)
		}
	}
}

// TestCommands: the package offers calibrate and verify, for the binary to
// register; registering them is the binary's (see the root module_test.go).
func TestCommands(t *testing.T) {
	byName := map[string]caddycmd.Command{}
	for _, c := range Commands(nil) {
		byName[c.Name] = c
	}
	if cmd := byName["calibrate"]; cmd.CobraFunc == nil || !strings.Contains(cmd.Usage, "--target <agreement>") {
		t.Errorf("calibrate: %+v", cmd)
	}
	if cmd := byName["verify"]; cmd.CobraFunc == nil || len(byName) != 2 {
		t.Errorf("commands %v", byName)
	}
}

func TestCommandNotes(t *testing.T) {
	in := strings.Repeat(`{"model":"m","type":"noul","question":"x","confidence":1,"agree":true,"audit":true}`+"\n", 3) +
		`{"model":"m","type":"choice","question":"x","confidence":1,"agree":true,"audit":true}` + "\n"
	out, stderr, err := runCommand(t, strings.NewReader(in), "--target", "0.5", "--by", "question", "--min-labels", "2", "-")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, `note: question "x" of "m" is asked as noul and choice`) {
		t.Errorf("stderr: %q", stderr)
	}
	if strings.Contains(out, "question x") {
		t.Errorf("x has a question line though it has two types:\n%s", out)
	}
	// Nothing audited: said so, nothing printed, an error (exit status 1),
	// in both output modes.
	for _, mode := range [][]string{nil, {"--json"}} {
		args := append(mode, "--target", "0.5", "-")
		out, _, err = runCommand(t, strings.NewReader(strings.ReplaceAll(in, `"audit":true`, `"audit":false`)), args...)
		if err == nil || !strings.Contains(err.Error(), "no audited labels in standard input (4 lines, 4 not audited)") || out != "" {
			t.Errorf("nothing audited %v: %v\n%s", mode, err, out)
		}
	}
	out, _, err = runCommand(t, strings.NewReader(""), "--target", "0.5", "-")
	if err == nil || !strings.Contains(err.Error(), "no audited labels in standard input (0 lines, 0 not audited)") || out != "" {
		t.Errorf("no lines: %v\n%s", err, out)
	}
}

// TestQuestionWithoutThreshold: with --by question, a question group that
// finds no threshold has no line, so the gateway would give it its type's
// threshold; the fragment and the notes say so.
func TestQuestionWithoutThreshold(t *testing.T) {
	q := func(id string, conf float64, agree bool) Line {
		return Line{Model: "m", Type: "noul", Question: id, Confidence: conf, HasConfidence: true, Agree: agree, Audit: true}
	}
	// Target 0.5, delta 0.25: MinLines 2. x: (3,0) at .9, bound 0: none.
	// The rest: .9 (1) skipped, .8 (2,2) 0.5 passes: noul 0.8.
	lines := []Line{q("x", .9, false), q("x", .9, false), q("x", .9, false), q("y", .9, true), q("z", .8, true)}
	res, err := Calibrate(lines, Options{Target: 0.5, Delta: 0.25, By: ByQuestion, MinLabels: 3, Method: MethodUniform})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Notes) != 1 || res.Notes[0] != `question "x" of "m" has no threshold of its own, so it takes its type's (noul 0.8), computed without its labels; run with --by type, or label more of it` {
		t.Errorf("notes: %q", res.Notes)
	}
	var buf bytes.Buffer
	if err := WriteFragment(&buf, res); err != nil {
		t.Fatal(err)
	}
	want := "route {\n\tpin m {\n\t\tnoul 0.8\n\t\t# question \"x\": no threshold of its own; it takes noul 0.8, computed without its labels\n\t}\n}\n"
	if buf.String() != want {
		t.Errorf("fragment:\n%s\nwant:\n%s", buf.String(), want)
	}
}
