package reviewloop_test

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"strings"
	"testing"
)

// step is one ```sh block of the walk-through, with the ```text block
// that follows it, if any: what the block prints.
type step struct {
	sh   string
	want []string // normalized; nil: the doc shows no output
	line int      // the sh block's first line in the doc, for messages
}

// fence matches a fenced block: its info string and its text.
var fence = regexp.MustCompile("(?ms)^```([^\\n]*)\\n(.*?)^```[ \\t]*$")

// readSteps returns the walk-through's sh blocks in order, each with the
// text block after it (before the next sh block), which is its output.
func readSteps(t *testing.T, path string) []step {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	var steps []step
	for _, m := range fence.FindAllStringSubmatchIndex(text, -1) {
		info, body := strings.Fields(text[m[2]:m[3]]), text[m[4]:m[5]]
		line := strings.Count(text[:m[0]], "\n") + 1
		if len(info) == 0 {
			t.Fatalf("%s:%d: a fenced block without a language", path, line)
		}
		switch info[0] {
		case "sh":
			steps = append(steps, step{sh: strings.TrimSpace(body), line: line})
		case "text":
			if len(steps) == 0 || steps[len(steps)-1].want != nil {
				t.Fatalf("%s:%d: a text block that follows no sh block of its own", path, line)
			}
			steps[len(steps)-1].want = normalize(body)
		}
	}
	return steps
}

// marker is what the script prints before each block, so that the output
// can be split back into the blocks' outputs; end, after the last.
const (
	marker = "<<<walkthrough block %d>>>"
	end    = "<<<walkthrough end>>>"
)

// script joins the blocks into one bash script, run in one shell as the
// doc says, with each block preceded by its marker; after is added after
// the block of that index (the test's port rewrite of the scratch copy).
// The script notes when each block starts, and when it ends, in times:
// a line "<block> <seconds since the epoch>" each.
func script(steps []step, ports *strings.Replacer, after map[int]string, times string) string {
	var b strings.Builder
	b.WriteString("set -euo pipefail\n")
	note := func(i int) { fmt.Fprintf(&b, "echo \"%d $EPOCHREALTIME\" >>'%s'\n", i, times) }
	for i, s := range steps {
		note(i)
		fmt.Fprintf(&b, "printf '\\n%s\\n'\n%s\n", fmt.Sprintf(marker, i), ports.Replace(s.sh))
		if a, ok := after[i]; ok {
			b.WriteString(a + "\n")
		}
	}
	note(len(steps))
	fmt.Fprintf(&b, "printf '\\n%s\\n'\n", end)
	return b.String()
}

// blockTimes reads the times a script noted: how long each block took,
// as "<block>:<seconds>s", for the log.
func blockTimes(times string) string {
	data, err := os.ReadFile(times)
	if err != nil {
		return err.Error()
	}
	var out []string
	var lastBlock string
	var last float64
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var at float64
		block, at0, _ := strings.Cut(l, " ")
		if _, err := fmt.Sscan(at0, &at); err != nil {
			return fmt.Sprintf("%q: %v", l, err)
		}
		if lastBlock != "" {
			out = append(out, fmt.Sprintf("%s:%.1fs", lastBlock, at-last))
		}
		lastBlock, last = block, at
	}
	return strings.Join(out, " ")
}

// splitOutputs cuts the script's output at the markers: one output per
// block, and whether the script got to its end.
func splitOutputs(out string, n int) ([]string, bool) {
	outputs := make([]string, n)
	rest := out
	for i := n - 1; i >= 0; i-- {
		m := fmt.Sprintf(marker, i)
		j := strings.LastIndex(rest, m)
		if j < 0 {
			continue
		}
		outputs[i] = rest[j+len(m):]
		rest = rest[:j]
	}
	done := strings.Contains(out, end)
	if done {
		last := outputs[n-1]
		outputs[n-1] = last[:strings.LastIndex(last, end)]
	}
	return outputs, done
}

// normalize gives an output's lines as a terminal shows them: a line
// redrawn with \r shows its last drawing; runs of blanks count as one
// space; blank lines are left out.
func normalize(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if i := strings.LastIndex(l, "\r"); i >= 0 {
			l = l[i+1:]
		}
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// placeholder is a value that differs from run to run, as the doc writes
// it: <id>, <entry>. The same name stands for the same value everywhere in
// the doc.
var placeholder = regexp.MustCompile(`<[a-z][a-z0-9-]*>`)

// matchOutput reports whether got (an output's normalized lines) is what
// the doc shows: line by line, a line "..." standing for any number of
// lines, each placeholder for one value, bound in bindings.
func matchOutput(want, got []string, bindings map[string]string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if want[0] == "..." {
		for k := 0; k <= len(got); k++ {
			b := maps.Clone(bindings)
			if matchOutput(want[1:], got[k:], b) {
				maps.Copy(bindings, b)
				return true
			}
		}
		return false
	}
	if len(got) == 0 {
		return false
	}
	b := maps.Clone(bindings)
	if !matchLine(want[0], got[0], b) || !matchOutput(want[1:], got[1:], b) {
		return false
	}
	maps.Copy(bindings, b)
	return true
}

// matchLine matches one line, binding its placeholders: a name bound
// before stands for its value; one not bound yet matches a value without
// blanks, commas or quotes, the same at each of its uses in the line.
func matchLine(want, got string, bindings map[string]string) bool {
	var re strings.Builder
	var unbound []string // the names of the groups, in order
	last := 0
	for _, m := range placeholder.FindAllStringIndex(want, -1) {
		re.WriteString(regexp.QuoteMeta(want[last:m[0]]))
		if v, ok := bindings[want[m[0]:m[1]]]; ok {
			re.WriteString(regexp.QuoteMeta(v))
		} else {
			unbound = append(unbound, want[m[0]:m[1]])
			re.WriteString(`([^\s,"]+)`)
		}
		last = m[1]
	}
	re.WriteString(regexp.QuoteMeta(want[last:]))
	m := regexp.MustCompile("^" + re.String() + "$").FindStringSubmatch(got)
	if m == nil {
		return false
	}
	values := map[string]string{}
	for i, name := range unbound {
		if v, ok := values[name]; ok && v != m[i+1] {
			return false
		}
		values[name] = m[i+1]
	}
	maps.Copy(bindings, values)
	return true
}

// The comparison of an output with the doc's: what it accepts and what it
// refuses, since TestWalkthrough passes only when it is right.
func TestMatchOutput(t *testing.T) {
	for _, c := range []struct {
		want, got string
		match     bool
	}{
		{"sent 100 of 400\nsent 200 of 400", "sent 100 of 400\nsent 200 of 400", true},
		{"sent 100 of 400\nsent 200 of 400", "sent 100 of 400\nsent 300 of 400", false},
		{"sent 100 of 400", "sent 100 of 400\nsent 200 of 400", false},
		{"     16 X-Route: auto", "16 X-Route: auto", true},
		{"...\nroute {\n}", "a table\n\nroute {\n}", true},
		{"...\nroute {\n}", "route {\n}", true},
		{"...\nroute {\n}", "route {\n}\nmore", false},
		{"noul 0.15 cert <id>\nok <id>", "noul 0.15 cert 0c5d\nok 0c5d", true},
		{"noul 0.15 cert <id>\nok <id>", "noul 0.15 cert 0c5d\nok 9999", false},
		{"late=<id>, refund=<id>", "late=ab, refund=ab", true},
		{"late=<id>, refund=<id>", "late=ab, refund=cd", false},
		{"late=<id>", "late=ab, refund=ab", false},
		{"replayed 400", "replayed 12\rreplayed 400", true},
	} {
		if got := matchOutput(normalize(c.want), normalize(c.got), map[string]string{}); got != c.match {
			t.Errorf("matchOutput(%q, %q) = %v, want %v", c.want, c.got, got, c.match)
		}
	}
	// A placeholder keeps its value from one block to the next.
	bindings := map[string]string{}
	if !matchOutput([]string{"cert <id>"}, []string{"cert 0c5d"}, bindings) || matchOutput([]string{"ok <id>"}, []string{"ok 9999"}, bindings) {
		t.Errorf("a placeholder bound in one output matches another value in the next: %v", bindings)
	}
}
