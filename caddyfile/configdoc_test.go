package caddyfile_test

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// configDoc is the reference of every option, relative to this package.
const configDoc = "../docs/configuration.md"

// TestConfigurationNamesEveryOption keeps docs/configuration.md complete and
// exact, both ways. The options are the ones the syntax blocks of
// syntaxDocs show (which TestSyntaxBlocks holds to their parsers): each
// line's name, and each keyword that introduces an argument (`maxlen <n>`,
// `alpha <a>`). For every block:
//   - each of its options is named in the first column of an options table
//     in the block's section (### `name`), or, for a nested block without
//     a section of its own (`org`, `pin`), in the section of the block
//     around it; a block with a section of its own is named by its heading;
//   - each name in that first column is an option of the section's blocks;
//   - the section links to the page that tells the options' story.
//
// And the syntax block at the top of the page shows every option of the
// directives it shows, and nothing else.
func TestConfigurationNamesEveryOption(t *testing.T) {
	data, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	sections := configSections(text)
	if len(sections) < 8 {
		t.Fatalf("%d option sections in %s; it has more: is the section parser broken?", len(sections), configDoc)
	}

	accepted := map[string]map[string]string{} // section -> option -> its path, as the errors name it
	var names []string                         // every option and directive name, for the syntax block
	for _, sd := range syntaxDocs {
		root := parseSyntaxBlock(t, sd)
		names = append(names, root.name)
		root.walk(nil, func(path []*syntaxNode, n *syntaxNode) {
			section := ""
			for _, b := range slices.Backward(append(slices.Clip(path), n)) {
				if sections[b.name] != nil {
					section = b.name
					break
				}
			}
			where := pathName(append(slices.Clip(path), n))
			if section == "" {
				t.Errorf("%s: `%s` (the syntax block of %s in %s) has no section of its own (### `%s`) in which its options have rows",
					configDoc, where, sd.fn, sd.doc, n.name)
				return
			}
			if accepted[section] == nil {
				accepted[section] = map[string]string{}
			}
			for _, c := range n.children {
				names = append(names, c.name)
				if !(c.block && sections[c.name] != nil) { // a block with a section is named by its heading
					accepted[section][c.name] = where + " " + c.name
				}
				for _, k := range keywords(c.args) {
					accepted[section][k] = where + " " + c.name + " ... " + k
				}
			}
		})
	}

	for _, name := range slices.Sorted(maps.Keys(sections)) {
		s := sections[name]
		if accepted[name] == nil {
			t.Errorf("%s:%d: section %q documents a block no parser has (no syntax block of syntaxDocs shows `%s`)", configDoc, s.line, s.heading, name)
			continue
		}
		if !s.linked {
			t.Errorf("%s:%d: section %q links to no page that tells its options' story", configDoc, s.line, s.heading)
		}
		for _, option := range slices.Sorted(maps.Keys(accepted[name])) {
			where := accepted[name][option]
			if _, ok := s.names[option]; !ok {
				t.Errorf("%s: option `%s` (%s) is not named in the first column of the options table of section %q", configDoc, option, where, s.heading)
			}
		}
		for _, option := range slices.Sorted(maps.Keys(s.names)) {
			line := s.names[option]
			if _, ok := accepted[name][option]; !ok {
				t.Errorf("%s:%d: section %q names `%s`, which no parser accepts in that block", configDoc, line, s.heading, option)
			}
		}
	}

	// The syntax block at the top.
	shown, roots := syntaxShown(t, text)
	for _, sd := range syntaxDocs {
		root := parseSyntaxBlock(t, sd)
		if !roots[root.name] {
			continue // shown in its own section only, as a log writer is
		}
		root.walk(nil, func(path []*syntaxNode, n *syntaxNode) {
			for _, c := range n.children {
				if !shown[c.name] {
					t.Errorf("%s: the syntax block does not show `%s %s`", configDoc, pathName(append(slices.Clip(path), n)), c.name)
				}
			}
		})
	}
	for _, name := range slices.Sorted(maps.Keys(shown)) {
		if !slices.Contains(names, name) {
			t.Errorf("%s: the syntax block shows `%s`, which no parser accepts", configDoc, name)
		}
	}
}

// docSection is a ### section of configuration.md that holds an options
// table (| option | default | ...).
type docSection struct {
	heading string
	line    int
	names   map[string]int // the option names of its tables' first column, by line
	linked  bool           // its prose links to a page
	table   bool
}

var (
	codeSpan    = regexp.MustCompile("`([^`]*)`")
	placeholder = regexp.MustCompile(`<[^>]*>`)
	optionWord  = regexp.MustCompile(`[a-z][a-z_]*`)
	pageLink    = regexp.MustCompile(`\]\([^)]*\.md(#[^)]*)?\)`)
	literalWord = regexp.MustCompile(`^[a-z][a-z_]*$`)
)

// configSections returns the sections of the page that hold an options
// table, by the first word of the heading's first code span (`guardrails
// <base_url>` is guardrails, The `buffered` log writer is buffered).
func configSections(text string) map[string]*docSection {
	sections := map[string]*docSection{}
	var cur *docSection
	inTable := false
	for i, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "### "):
			cur, inTable = nil, false
			if m := codeSpan.FindStringSubmatch(line); m != nil {
				name, _, _ := strings.Cut(m[1], " ")
				cur = &docSection{heading: strings.TrimPrefix(line, "### "), line: i + 1, names: map[string]int{}}
				sections[name] = cur
			}
		case strings.HasPrefix(line, "#"):
			cur, inTable = nil, false
		case cur == nil:
		case strings.HasPrefix(line, "|"):
			first, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), "|")
			switch {
			case strings.TrimSpace(first) == "option":
				inTable, cur.table = true, true
			case inTable && !strings.HasPrefix(line, "|---"):
				for _, name := range optionWord.FindAllString(placeholder.ReplaceAllString(first, ""), -1) {
					if _, ok := cur.names[name]; !ok {
						cur.names[name] = i + 1
					}
				}
			}
		default:
			inTable = false
			cur.linked = cur.linked || pageLink.MatchString(line)
		}
	}
	for name, s := range sections {
		if !s.table {
			delete(sections, name)
		}
	}
	return sections
}

// literalPair is an optional keyword with its one literal value, `[by org]`.
var literalPair = regexp.MustCompile(`\[([a-z_]+) ([a-z_]+)\]`)

// keywords are the words of an argument spec that introduce an argument
// of their own: a literal word followed by a <placeholder> ("maxlen" in
// `<stream> [maxlen <n>]`, "active" in `<fraction>|active <share>`), and
// both words of an optional literal pair ("by" and "org" in `[by org]`).
func keywords(spec string) []string {
	var out []string
	// An optional pair of literal words (`[by org]`) is a keyword and the
	// one value it takes: the page's row names both.
	for _, m := range literalPair.FindAllStringSubmatch(spec, -1) {
		out = append(out, m[1], m[2])
	}
	fields := strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(spec))
	for i := 0; i+1 < len(fields); i++ {
		alternatives := strings.Split(fields[i], "|")
		word := alternatives[len(alternatives)-1]
		if literalWord.MatchString(word) && strings.HasPrefix(fields[i+1], "<") {
			out = append(out, word)
		}
	}
	return out
}

// syntaxShown returns the names the page's syntax block (the ```text block
// that shows `systemone {`) gives a line of, and the directives among
// them (the lines that are not indented).
func syntaxShown(t *testing.T, text string) (shown, roots map[string]bool) {
	t.Helper()
	m := regexp.MustCompile("(?s)```text\n(systemone \\{\n.*?)```").FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("%s: no syntax block (```text starting with `systemone {`)", configDoc)
	}
	shown, roots = map[string]bool{}, map[string]bool{}
	for _, line := range strings.Split(m[1], "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "}" {
			continue
		}
		shown[f[0]] = true
		if !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, " ") {
			roots[f[0]] = true
		}
	}
	return shown, roots
}
