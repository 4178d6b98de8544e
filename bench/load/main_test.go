package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/bench/internal/harness"
)

// TestDocumentedCommands parses every `go run ./bench/load` command that
// BENCHMARKS.md shows, as the shell would split it: a flag renamed or a
// configuration dropped fails here, not in an operator's terminal.
func TestDocumentedCommands(t *testing.T) {
	doc, err := os.ReadFile("../../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "go run ./bench/load"
	n := 0
	for line := range strings.Lines(string(doc)) {
		line, _, _ = strings.Cut(line, "#") // a shell comment
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		n++
		var args []string
		for _, f := range strings.Fields(strings.TrimPrefix(line, prefix)) {
			args = append(args, strings.Trim(f, `"`)) // "" is an empty argument
		}
		o, err := parseArgs(args)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if _, err := getPayloads(o.payloads); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if line == prefix+` -configs L,Lb,Lm -payloads small-en -sim-payloads "" -rounds 3 -duration 3s` {
			if want := []string{harness.Plain, harness.Limits, harness.LimitsBudget, harness.LimitsLocal}; !slices.Equal(o.configs, want) ||
				o.simPayloads != nil || o.rounds != 3 || o.duration != 3*time.Second {
				t.Fatalf("%s: options %+v", line, o)
			}
		}
	}
	if n == 0 {
		t.Fatalf("no %q command in BENCHMARKS.md", prefix)
	}
}

func TestUnknownConfigIsRefused(t *testing.T) {
	if _, err := parseArgs([]string{"-configs", "L,Lq"}); err == nil || !strings.Contains(err.Error(), `"Lq"`) {
		t.Fatalf("got %v, want the unknown configuration named", err)
	}
}

// TestDocumentedGoTests checks every `go test` command BENCHMARKS.md shows
// against the code: each part of its -bench or -run pattern (names joined
// by |) matches a test or benchmark of the package the command names, so a
// benchmark renamed or moved fails here.
func TestDocumentedGoTests(t *testing.T) {
	doc, err := os.ReadFile("../../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(doc)) {
		line, _, _ = strings.Cut(line, "#")
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "go" || fields[1] != "test" {
			continue
		}
		var pkg string
		var names []string
		for i, f := range fields {
			if strings.HasPrefix(f, "./") && pkg == "" {
				pkg = f
			}
			if (f == "-bench" || f == "-run") && i+1 < len(fields) {
				pattern := strings.Trim(fields[i+1], `'"`)
				if pattern == "^$" {
					continue
				}
				names = append(names, strings.Split(pattern, "|")...)
			}
		}
		if pkg == "" || len(names) == 0 {
			t.Fatalf("%s: no package or no name", strings.TrimSpace(line))
		}
		var src strings.Builder
		files, err := filepath.Glob(filepath.Join("../..", pkg, "*_test.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no test files in %s", strings.TrimSpace(line), pkg)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
		funcs := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark)\w+)\(`).FindAllStringSubmatch(src.String(), -1)
		for _, name := range names {
			// As go test reads it: a regular expression, matched anywhere.
			re, err := regexp.Compile(name)
			if err != nil {
				t.Fatalf("%s: %v", strings.TrimSpace(line), err)
			}
			if !slices.ContainsFunc(funcs, func(m []string) bool { return re.MatchString(m[1]) }) {
				t.Errorf("%s: %s has no test or benchmark that %s matches", strings.TrimSpace(line), pkg, name)
			}
		}
		n++
	}
	if n < 5 {
		t.Fatalf("%d `go test` commands in BENCHMARKS.md, want the documented ones", n)
	}
}
