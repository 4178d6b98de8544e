// Package docs holds the tests that keep the documentation true: every
// Caddyfile example adapts with the real adapter, every bad value in the
// configuration reference gets the error written beside it, the shell
// examples run against a gateway started as the README starts it, and every
// relative link and anchor resolves. The test reads README.md, BENCHMARKS.md
// and every *.md under docs/, so pages added later are checked too.
//
// A fenced block's info string says what the test does with it:
//
//	```caddyfile               a whole Caddyfile, adapted
//	```caddyfile in-site       the inside of a site block, adapted in one
//	```caddyfile in-systemone  the inside of a systemone directive, adapted in one
//	```caddyfile append        a whole Caddyfile, adapted, and appended to the root
//	                           Caddyfile for the shell examples' gateway
//	```caddyfile serve         a whole Caddyfile, adapted, and served by the next
//	                           `... run --config <file>` of the shell examples;
//	                           the repository holds <file> with the same text
//	```sh, ```console          commands (console: the lines after "$ ") run by the
//	                           test: curl against the gateway, promtool,
//	                           systemone-gateway subcommands; `bash <file>` is
//	                           syntax-checked; `... run [--config <file>]` starts
//	                           the gateway the next commands run against
//	```<lang> illustrative     shown, not run: it needs what a test cannot have
package docs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/systemone/systemone-gateway"
)

// root is the repository, relative to this package.
const root = ".."

// pages returns the Markdown files the docs consist of, relative to root.
func pages(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "BENCHMARKS.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range more {
		rel, _ := filepath.Rel(root, f)
		files = append(files, rel)
	}
	return files
}

func read(t *testing.T, page string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// block is one fenced code block of a page.
type block struct {
	page string
	line int      // of the opening fence
	lang string   // the info string's first word
	tags []string // the info string's other words
	text string   // the content, the fence's indentation removed
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.page, b.line) }

func (b block) has(tag string) bool { return slices.Contains(b.tags, tag) }

// blocks returns a page's fenced blocks, and its lines outside them (the
// ones inside are blanked, so line numbers stay).
func blocks(page, text string) (out []block, prose []string) {
	lines := strings.Split(text, "\n")
	prose = make([]string, len(lines))
	var cur *block
	var indent string
	var body []string
	for i, line := range lines {
		trimmed := strings.TrimLeft(line, " ")
		if cur == nil {
			if strings.HasPrefix(trimmed, "```") {
				info := strings.Fields(strings.TrimPrefix(trimmed, "```"))
				cur = &block{page: page, line: i + 1}
				if len(info) > 0 {
					cur.lang, cur.tags = info[0], info[1:]
				}
				indent = line[:len(line)-len(trimmed)]
				body = nil
				continue
			}
			prose[i] = line
			continue
		}
		if strings.HasPrefix(trimmed, "```") && strings.TrimSpace(trimmed) == "```" {
			cur.text = strings.Join(body, "\n") + "\n"
			out = append(out, *cur)
			cur = nil
			continue
		}
		body = append(body, strings.TrimPrefix(line, indent))
	}
	return out, prose
}

func allBlocks(t *testing.T) []block {
	t.Helper()
	var out []block
	for _, p := range pages(t) {
		b, _ := blocks(p, read(t, p))
		out = append(out, b...)
	}
	return out
}

func adapt(text string) ([]byte, error) {
	return adaptFile(text, "Caddyfile")
}

// adaptFile adapts text as the Caddyfile at path: the files it imports
// are read relative to the path's directory.
func adaptFile(text, path string) ([]byte, error) {
	adapter := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}
	cfg, _, err := adapter.Adapt([]byte(text), map[string]any{"filename": path})
	return cfg, err
}

// caddyfileOf returns the whole Caddyfile a caddyfile block stands for.
func caddyfileOf(b block) (string, error) {
	switch {
	case b.has("in-site"):
		return ":8080 {\n" + b.text + "}\n", nil
	case b.has("in-systemone"):
		return ":8080 {\n\tsystemone {\n" + b.text + "\t}\n\treverse_proxy 127.0.0.1:9080\n}\n", nil
	}
	for _, tag := range b.tags {
		if tag != "append" && tag != "serve" {
			return "", fmt.Errorf("unknown tag %q for a caddyfile block (want in-site, in-systemone, append or serve)", tag)
		}
	}
	return b.text, nil
}

// Every Caddyfile example adapts with the real adapter and the gateway's
// modules.
func TestCaddyfileExamplesAdapt(t *testing.T) {
	n := 0
	for _, b := range allBlocks(t) {
		if b.lang != "caddyfile" {
			continue
		}
		n++
		text, err := caddyfileOf(b)
		if err != nil {
			t.Errorf("%s: %v", b, err)
			continue
		}
		if _, err := adapt(text); err != nil {
			t.Errorf("%s: the example does not adapt: %v\n%s", b, err, text)
		}
	}
	if n < 10 {
		t.Errorf("%d caddyfile examples found; the docs have more: is the fence parser broken?", n)
	}
}

// optionRow is one row of an options table in the configuration reference.
type optionRow struct {
	line           int
	option, badVal string
	wantErr        string
}

var codeSpan = regexp.MustCompile("`([^`]*)`")

func unquote(cell string) string {
	cell = strings.TrimSpace(cell)
	if m := codeSpan.FindStringSubmatch(cell); m != nil && m[0] == cell {
		return m[1]
	}
	return cell
}

// optionRows reads every table whose header is
// | option | default | accepts | bad value | error |.
func optionRows(t *testing.T, text string) []optionRow {
	t.Helper()
	var rows []optionRow
	in := false
	for i, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "|") {
			in = false
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) == 5 && strings.TrimSpace(cells[0]) == "option" && strings.TrimSpace(cells[3]) == "bad value" {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		if len(cells) != 5 {
			t.Errorf("configuration.md:%d: %d cells, want 5 (a `|` inside a cell?)", i+1, len(cells))
			continue
		}
		rows = append(rows, optionRow{line: i + 1, option: unquote(cells[0]), badVal: unquote(cells[3]), wantErr: unquote(cells[4])})
		if strings.TrimSpace(cells[0]) != "" && strings.TrimSpace(cells[1]) == "" {
			t.Errorf("configuration.md:%d: option %s has no default", i+1, cells[0])
		}
	}
	return rows
}

// expand turns a one-line fragment of the tables into Caddyfile lines.
var expand = strings.NewReplacer("; ", "\n", "{ ", "{\n", " }", "\n}")

// badCaddyfile wraps a table's bad value in a whole Caddyfile.
func badCaddyfile(bad string) string {
	bad = expand.Replace(bad)
	switch {
	case strings.HasPrefix(bad, "systemone_review"), strings.HasPrefix(bad, "systemone_simulator"), strings.HasPrefix(bad, "systemone_health"):
		return ":8080 {\n" + bad + "\n}\n"
	case strings.HasPrefix(bad, "log "):
		return "{\n" + bad + "\n}\n:8080 {\n\trespond ok\n}\n"
	}
	return ":8080 {\nsystemone {\n" + bad + "\n}\nreverse_proxy 127.0.0.1:9080\n}\n"
}

// Every bad value in the configuration reference is refused, by the
// adapter or when the config loads, with the error written beside it.
func TestOptionErrors(t *testing.T) {
	rows := optionRows(t, read(t, "docs/configuration.md"))
	checked := 0
	for _, r := range rows {
		if r.badVal == "" {
			if r.wantErr != "" {
				t.Errorf("configuration.md:%d: an error without a bad value", r.line)
			}
			continue
		}
		checked++
		text := badCaddyfile(r.badVal)
		err := loadErr(text)
		switch {
		case err == nil:
			t.Errorf("configuration.md:%d: %s is accepted, want %q\n%s", r.line, r.badVal, r.wantErr, text)
		case !strings.Contains(err.Error(), r.wantErr):
			t.Errorf("configuration.md:%d: %s\n got: %v\nwant: %s", r.line, r.badVal, err, r.wantErr)
		}
	}
	if checked < 30 {
		t.Errorf("%d bad values checked; the tables have more: is the table parser broken?", checked)
	}
}

// loadErr is what `caddy validate` reports for a Caddyfile: an adapt error,
// or an error provisioning its modules.
func loadErr(text string) error {
	cfgJSON, err := adapt(text)
	if err != nil {
		return err
	}
	var cfg caddy.Config
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		return err
	}
	return caddy.Validate(&cfg)
}

// Every option the syntax block names has a row in the options tables.
func TestEveryOptionInATable(t *testing.T) {
	text := read(t, "docs/configuration.md")
	bs, _ := blocks("docs/configuration.md", text)
	var syntax string
	for _, b := range bs {
		if b.lang == "text" && strings.Contains(b.text, "systemone {") {
			syntax = b.text
		}
	}
	if syntax == "" {
		t.Fatal("no syntax block in configuration.md")
	}
	documented := map[string]bool{}
	for _, r := range optionRows(t, text) {
		for _, name := range strings.FieldsFunc(r.option, func(c rune) bool { return c == ',' || c == ' ' }) {
			documented[strings.Trim(name, "`")] = true
		}
	}
	for _, line := range strings.Split(syntax, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "}" || strings.HasSuffix(f[0], "systemone") || strings.HasPrefix(f[0], "systemone") {
			continue
		}
		name := f[0]
		if name == "guardrails" || name == "limits" || name == "breaker" || name == "route" {
			continue // blocks: their options have the rows
		}
		if !documented[name] {
			t.Errorf("option %q of the syntax block has no row in the options tables", name)
		}
	}
}

// anchors returns the GitHub anchors of a page's headings.
func anchors(text string) map[string]bool {
	_, prose := blocks("", text)
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range prose {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '_', r == '-':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link and anchor in the docs resolves.
func TestLinks(t *testing.T) {
	checked := 0
	for _, page := range pages(t) {
		_, prose := blocks(page, read(t, page))
		for i, line := range prose {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, anchor, _ := strings.Cut(target, "#")
				file := filepath.Join(root, page)
				if path != "" {
					file = filepath.Join(root, filepath.Dir(page), path)
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s:%d: link %s: %v", page, i+1, target, err)
					continue
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(file, ".md") {
					t.Errorf("%s:%d: link %s: an anchor into a file that is not Markdown", page, i+1, target)
					continue
				}
				data, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if !anchors(string(data))[anchor] {
					t.Errorf("%s:%d: link %s: no heading with anchor #%s in %s", page, i+1, target, anchor, path)
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("%d links checked; the docs have more: is the link parser broken?", checked)
	}
}

// The anchor rule is GitHub's: lower case, punctuation dropped, spaces to
// hyphens, a number for repeats.
func TestAnchors(t *testing.T) {
	got := anchors("# A b\n## `reverse_proxy`: one setting\n### `guardrails <base_url>`\n```\n# not a heading\n```\n## A b\n")
	for _, want := range []string{"a-b", "reverse_proxy-one-setting", "guardrails-base_url", "a-b-1"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a line in a code block was read as a heading")
	}
}

// The README stays an overview: at most 500 lines, and exactly two commands
// under "Two commands", the gateway's and the tests'.
func TestReadmeShape(t *testing.T) {
	text := read(t, "README.md")
	if n := strings.Count(text, "\n"); n > 500 {
		t.Errorf("README.md has %d lines; at most 500: move reference into docs/", n)
	}
	bs, prose := blocks("README.md", text)
	start, end := 0, len(prose)
	for i, line := range prose {
		switch {
		case line == "## Two commands":
			start = i + 1
		case start > 0 && i >= start && strings.HasPrefix(line, "## ") && end == len(prose):
			end = i + 1
		}
	}
	if start == 0 {
		t.Fatal("README.md has no section \"## Two commands\"")
	}
	var got []string
	for _, b := range bs {
		if b.line > start && b.line < end {
			got = append(got, commands(b)...)
		}
	}
	want := []string{gatewayCommand + " run", "bash .ci/run"}
	if !slices.Equal(got, want) {
		t.Errorf("the commands under \"Two commands\" are %q, want %q", got, want)
	}
}

// The docs speak of the product: no page cites a file the repository does
// not hold as its source of truth.
func TestNoContractCitations(t *testing.T) {
	for _, page := range pages(t) {
		if strings.Contains(read(t, page), "CONTRACT.md") {
			t.Errorf("%s cites CONTRACT.md, which the repository does not hold", page)
		}
	}
}
