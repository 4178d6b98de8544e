package caddyfile_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// syntaxDoc is a Caddyfile directive whose syntax is documented in the doc
// comment of its parser function, as an indented block.
type syntaxDoc struct {
	doc    string   // the file holding the documented function
	fn     string   // its name
	parser []string // the files whose switch statements name the subdirectives (case labels)
	// within is a whole Caddyfile with %s where the directive goes; empty:
	// the directive goes inside a site.
	within string
}

// syntaxDocs lists every directive of the module. A new directive's parser
// belongs here.
var syntaxDocs = []syntaxDoc{
	{doc: "caddyfile.go", fn: "Unmarshal", parser: []string{"caddyfile.go", "limits.go", "guardrails.go", "breaker.go", "cache.go", "route.go"}},
	{doc: "health.go", fn: "UnmarshalHealth", parser: []string{"health.go"}},
	{doc: "../internal/review/api/caddyfile.go", fn: "UnmarshalCaddyfile", parser: []string{"../internal/review/api/caddyfile.go"}},
	{doc: "../simulator/caddyfile.go", fn: "UnmarshalCaddyfile", parser: []string{"../simulator/caddyfile.go"}},
	// A log writer: the global log option's output.
	{doc: "../internal/bufferedlog/bufferedlog.go", fn: "UnmarshalCaddyfile", parser: []string{"../internal/bufferedlog/bufferedlog.go"},
		within: "{\n\tlog {\n\t\toutput%s\t}\n}\n:8080 {\n\trespond ok\n}\n"},
}

// samples are the values the syntax blocks' <placeholders> take in the
// Caddyfile TestSyntaxBlocks adapts. A placeholder new to a syntax block
// needs one here.
var samples = map[string]string{
	"<n>": "1", "<size>": "1MiB", "<duration>": "1s", "<fraction>": "0.1", "<threshold>": "0.5",
	"<header>": "X-Org-Id", "<file>": "/etc/systemone/keys.json", "<org>": "acme", "<id>": "q1",
	"<url>": "redis://127.0.0.1:6379", "<base_url>": "http://127.0.0.1:9080", "<prefix>": "gw:",
	"<key>": "sample-key", "<name>": "sample", "<level>": "high", "<category>": "privacy",
	"<version>": "service-1.0.0", "<stream>": "review", "<yuan>": "1.5", "<zone>": "Asia/Shanghai",
	"<share>": "2", "<interval>": "100ms", "<target>": "0.9", "<a>": "0.05", "<bytes>": "64KiB",
	"<cert_id>": "0123456789abcdef",
}

// sampleLines replace the generic sample of an option (by its path of
// block names, as in the errors) where the generic one would clash with
// another option's.
var sampleLines = map[string]string{
	"systemone guardrails review": "review low", // block high
	// Two forms in one line; the active form is parsed by TestUnmarshalActiveAudit.
	"systemone route audit": "audit 0.1",
	// No file holds the sample cert ids: a name with a placeholder is
	// checked when the route is provisioned, not when it is adapted.
	"systemone route certificates": "certificates {env.SYSTEMONE_CERTIFICATES}",
	// The second version must differ from the first.
	"systemone route escalate": "escalate service-1.0.0 to service-2.0.0",
	// The wrapped writer: one that takes no arguments and no block.
	"buffered output": "output stderr",
}

// TestSyntaxBlocks keeps each directive's documented syntax and its parser
// together, both ways:
//   - the syntax block, every option with a sample value, adapts;
//   - every subdirective the parser accepts in a block (each case label of
//     its switches, tried in each documented block) is shown in that block.
func TestSyntaxBlocks(t *testing.T) {
	for _, sd := range syntaxDocs {
		file := path.Join("caddyfile", sd.doc) // as the repository names it
		t.Run(file, func(t *testing.T) {
			root := parseSyntaxBlock(t, sd)
			caddyfileText, err := root.sample(nil)
			if err != nil {
				t.Fatalf("%s: the syntax block of %s: %v", file, sd.fn, err)
			}
			t.Logf("the syntax block with sample values:\n%s", caddyfileText)
			if err := sd.adapt(caddyfileText); err != nil {
				t.Errorf("%s: the syntax block of %s, every option with a sample value, does not adapt: %v\n%s", file, sd.fn, err, caddyfileText)
			}
			labels := caseLabels(t, sd.parser)
			root.walk(nil, func(path []*syntaxNode, n *syntaxNode) {
				for _, label := range labels {
					if n.child(label) != nil {
						continue
					}
					probe := &syntaxNode{name: label}
					text := n.withOnly(path, probe)
					err := sd.adapt(text)
					if err != nil && unknown(err, label) {
						continue
					}
					t.Errorf("%s: the parser accepts %q in `%s`, but the syntax block in the doc comment of %s does not show it there: add it, with its arguments (adapting it gave %v)",
						file, label, pathName(append(path, n)), sd.fn, err)
				}
			})
		})
	}
}

// adapt adapts a Caddyfile holding text where sd's directive goes.
func (sd syntaxDoc) adapt(text string) error {
	whole := ":8080 {\n" + text + "}\n"
	if sd.within != "" {
		whole = fmt.Sprintf(sd.within, text)
	}
	adapter := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}
	_, _, err := adapter.Adapt([]byte(whole), map[string]any{"filename": "Caddyfile"})
	return err
}

// unknown reports whether err is a parser's refusal of name as a
// subdirective it does not know in that block.
func unknown(err error, name string) bool {
	msg := err.Error()
	return strings.Contains(msg, strconv.Quote(name)) && (strings.Contains(msg, "unknown") || strings.Contains(msg, "unrecognized"))
}

// syntaxNode is one line of a syntax block: a name, its argument spec and,
// for a block, its lines.
type syntaxNode struct {
	name     string
	args     string // as documented, e.g. "<yuan> per day|month"
	children []*syntaxNode
	block    bool
}

func (n *syntaxNode) child(name string) *syntaxNode {
	for _, c := range n.children {
		if c.name == name {
			return c
		}
	}
	return nil
}

// walk calls fn on n and every block under it, with the blocks above.
func (n *syntaxNode) walk(path []*syntaxNode, fn func(path []*syntaxNode, n *syntaxNode)) {
	fn(path, n)
	for _, c := range n.children {
		if c.block {
			c.walk(append(slices.Clip(path), n), fn)
		}
	}
}

func pathName(path []*syntaxNode) string {
	names := make([]string, len(path))
	for i, n := range path {
		names[i] = n.name
	}
	return strings.Join(names, " ")
}

// sample writes n with every option it documents, each with sample
// arguments.
func (n *syntaxNode) sample(path []*syntaxNode) (string, error) {
	var b strings.Builder
	if err := n.write(&b, path, true); err != nil {
		return "", err
	}
	return b.String(), nil
}

// withOnly writes the blocks of path and n, each opened with its sample
// arguments, with only extra inside n.
func (n *syntaxNode) withOnly(path []*syntaxNode, extra *syntaxNode) string {
	var b strings.Builder
	all := append(slices.Clip(path), n)
	for i, p := range all {
		line, _ := p.line(all[:i])
		b.WriteString(strings.Repeat("\t", i+1) + line + " {\n")
	}
	b.WriteString(strings.Repeat("\t", len(all)+1) + extra.name + "\n")
	for i := len(all) - 1; i >= 0; i-- {
		b.WriteString(strings.Repeat("\t", i+1) + "}\n")
	}
	return b.String()
}

func (n *syntaxNode) write(b *strings.Builder, path []*syntaxNode, all bool) error {
	depth := len(path) + 1
	line, err := n.line(path)
	if err != nil {
		return err
	}
	b.WriteString(strings.Repeat("\t", depth) + line)
	if !n.block {
		b.WriteString("\n")
		return nil
	}
	b.WriteString(" {\n")
	for _, c := range n.children {
		if err := c.write(b, append(slices.Clip(path), n), all); err != nil {
			return err
		}
	}
	b.WriteString(strings.Repeat("\t", depth) + "}\n")
	return nil
}

// line is n's name and sample arguments.
func (n *syntaxNode) line(path []*syntaxNode) (string, error) {
	key := pathName(append(slices.Clip(path), n))
	if l, ok := sampleLines[key]; ok {
		return l, nil
	}
	if len(path) == 0 {
		return n.name, nil // the directive itself: no matcher
	}
	args, err := sampleArgs(n.args)
	if err != nil {
		return "", fmt.Errorf("`%s %s`: %v", key, n.args, err)
	}
	return strings.TrimSpace(n.name + " " + args), nil
}

// sampleArgs turns an argument spec into sample arguments: a <placeholder>
// takes its sample, a|b the first choice, an optional [...] is written out
// (unless it only repeats: [<url>...]), x... is written once.
func sampleArgs(spec string) (string, error) {
	var out []string
	for len(spec) > 0 {
		spec = strings.TrimLeft(spec, " ")
		if spec == "" {
			break
		}
		if spec[0] == '[' {
			end := matchingBracket(spec)
			if end < 0 {
				return "", fmt.Errorf("unbalanced [ in %q", spec)
			}
			inner := spec[1:end]
			spec = spec[end+1:]
			if strings.HasSuffix(inner, "...") {
				continue
			}
			s, err := sampleArgs(inner)
			if err != nil {
				return "", err
			}
			out = append(out, s)
			continue
		}
		word, rest, _ := strings.Cut(spec, " ")
		spec = rest
		word = strings.TrimSuffix(word, "...")
		word, _, _ = strings.Cut(word, "|")
		s, err := sampleWord(word)
		if err != nil {
			return "", err
		}
		out = append(out, s)
	}
	return strings.Join(out, " "), nil
}

// sampleWord is a word of an argument spec with its placeholders replaced
// ("<share>%" is "2%"); a literal word stays.
func sampleWord(word string) (string, error) {
	var b strings.Builder
	for word != "" {
		i := strings.IndexByte(word, '<')
		if i < 0 {
			b.WriteString(word)
			break
		}
		j := strings.IndexByte(word[i:], '>')
		if j < 0 {
			return "", fmt.Errorf("unclosed < in %q", word)
		}
		name := word[i : i+j+1]
		v, ok := samples[name]
		if !ok {
			return "", fmt.Errorf("no sample value for %s: add one to samples in caddyfile/syntax_test.go", name)
		}
		b.WriteString(word[:i] + v)
		word = word[i+j+1:]
	}
	return b.String(), nil
}

func matchingBracket(s string) int {
	depth := 0
	for i, c := range s {
		switch c {
		case '[':
			depth++
		case ']':
			if depth--; depth == 0 {
				return i
			}
		}
	}
	return -1
}

// parseSyntaxBlock reads the first indented block of sd.fn's doc comment
// into a tree: each line a name and its arguments, a line ending in { a
// block that ends at its }.
func parseSyntaxBlock(t *testing.T, sd syntaxDoc) *syntaxNode {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), sd.doc, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, decl := range f.Decls {
		if fd, ok := decl.(*ast.FuncDecl); ok && fd.Name.Name == sd.fn && fd.Doc != nil {
			doc = fd.Doc.Text()
		}
	}
	var lines []string
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "\t") {
			lines = append(lines, strings.TrimSpace(l))
		} else if len(lines) > 0 && strings.TrimSpace(l) == "" {
			break
		}
	}
	if len(lines) == 0 {
		t.Fatalf("%s: the doc comment of %s has no indented syntax block", sd.doc, sd.fn)
	}
	var stack []*syntaxNode
	var root *syntaxNode
	for _, l := range lines {
		if l == "}" {
			if len(stack) == 0 {
				t.Fatalf("%s: the syntax block of %s closes a block it did not open", sd.doc, sd.fn)
			}
			stack = stack[:len(stack)-1]
			continue
		}
		text, isBlock := strings.CutSuffix(l, "{")
		name, args, _ := strings.Cut(strings.TrimSpace(text), " ")
		n := &syntaxNode{name: name, args: strings.TrimSpace(args), block: isBlock}
		switch {
		case root == nil:
			root = n
		case len(stack) == 0:
			t.Fatalf("%s: the syntax block of %s has %q after its end", sd.doc, sd.fn, l)
		default:
			parent := stack[len(stack)-1]
			if parent.child(name) != nil {
				t.Fatalf("%s: the syntax block of %s shows %q twice in `%s`", sd.doc, sd.fn, name, parent.name)
			}
			parent.children = append(parent.children, n)
		}
		if isBlock {
			stack = append(stack, n)
		}
	}
	if len(stack) != 0 {
		t.Fatalf("%s: the syntax block of %s leaves `%s` open", sd.doc, sd.fn, stack[len(stack)-1].name)
	}
	return root
}

// caseLabels is every string constant in a case clause of the files'
// switch statements: every name a parser can accept.
func caseLabels(t *testing.T, files []string) []string {
	t.Helper()
	var labels []string
	for _, file := range files {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(node ast.Node) bool {
			cc, ok := node.(*ast.CaseClause)
			if !ok {
				return true
			}
			for _, e := range cc.List {
				if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if v, err := strconv.Unquote(lit.Value); err == nil && !slices.Contains(labels, v) {
						labels = append(labels, v)
					}
				}
			}
			return true
		})
	}
	if len(labels) == 0 {
		t.Fatalf("no case labels in %v", files)
	}
	return labels
}
