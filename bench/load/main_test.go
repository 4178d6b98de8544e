package main

import (
	"os"
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
	if _, err := parseArgs([]string{"-configs", "L,Lx"}); err == nil || !strings.Contains(err.Error(), `"Lx"`) {
		t.Fatalf("got %v, want the unknown configuration named", err)
	}
}
