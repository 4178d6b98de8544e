package docs

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/systemone/systemone-gateway"

// TestArchitecture holds docs/architecture.md to the code: every package of
// the gateway (outside bench/ and deploy/) is in a room the page's map
// names, no package imports a room on a floor above its own, no room
// imports what its "does not" line rules out (forbidden), and no Go file
// is over 600 lines.
func TestArchitecture(t *testing.T) {
	t.Run("lines", testFileLength)
	rooms := architectureRooms(t)
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		if strings.HasPrefix(pkg, "bench") || strings.HasPrefix(pkg, "deploy") || pkg == "docs" {
			continue
		}
		for _, imp := range fields[1:] {
			if why := forbidden(pkg, strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")); why != "" {
				t.Errorf("%s imports %s: %s", pkg, imp, why)
			}
		}
		floor, ok := rooms.floor(pkg)
		if !ok {
			t.Errorf("package %q is in no room of docs/architecture.md", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			imported := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			if f, ok := rooms.floor(imported); ok && f < floor {
				t.Errorf("%s (floor %d) imports %s (floor %d), a floor above it", pkg, floor, imported, f)
			}
		}
	}
}

// importRule is a "does not" line of the page's rooms table that is a fact
// of imports: no package under from (but those under except) imports a
// package under one of to. Paths of the module are written without the
// module's path; "x/..." is x and every package under it.
type importRule struct {
	from   string
	except []string
	to     []string
	why    string
}

var (
	wing      = "internal/review/..."
	policies  = "policy/..."
	pipeline  = "handlers/..."
	noRequest = []string{policies, pipeline}
)

// importRules are the rooms table's "does not" lines that imports decide.
var importRules = []importRule{
	{from: wing, to: noRequest, why: "the review wing imports no policy and not handlers"},
	{from: policies, to: []string{pipeline}, why: "a policy does not know the HTTP handlers"},
	{from: "evaluation/...", to: []string{policies, pipeline, wing}, why: "evaluation knows no policy, handler or review room"},
	{from: "simulator/...", to: []string{policies, pipeline, wing}, why: "the simulator is the upstream's stand-in, apart from the gateway"},
	{from: "internal/...", except: []string{wing, "internal/gatewaytest"}, to: []string{policies, pipeline, wing, "caddyfile/..."},
		why: "plumbing knows no policy, handler or review room"},
	{from: "internal/review/record", to: []string{"io", "os", "net/...", "github.com/redis/go-redis/v9/..."}, why: "record does no I/O"},
	{from: "internal/review/calibrate/...", to: []string{"net/http/..."}, why: "calibrate talks HTTP through internal/review/client"},
}

// forbidden returns why pkg may not import imp ("" when it may): a rule of
// importRules, or one policy importing another.
func forbidden(pkg, imp string) string {
	for _, r := range importRules {
		if !under(pkg, r.from) || slices.ContainsFunc(r.except, func(e string) bool { return under(pkg, e) }) {
			continue
		}
		if slices.ContainsFunc(r.to, func(to string) bool { return under(imp, to) }) {
			return r.why
		}
	}
	if p, ok := strings.CutPrefix(pkg, "policy/"); ok {
		if i, ok := strings.CutPrefix(imp, "policy/"); ok && strings.Split(p, "/")[0] != strings.Split(i, "/")[0] {
			return "a policy knows no other policy"
		}
	}
	return ""
}

// under reports whether pkg is path, or lies under it when path ends in
// "/...".
func under(pkg, path string) bool {
	if prefix, ok := strings.CutSuffix(path, "/..."); ok {
		return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
	}
	return pkg == path
}

// TestImportRules holds forbidden to the cases it exists for, so that a
// rule that could not fail is caught.
func TestImportRules(t *testing.T) {
	for _, c := range []struct {
		pkg, imp string
		ok       bool
	}{
		{"internal/review/api", "policy/route", false},
		{"internal/review/monitor", "handlers", false},
		{"internal/review/alarms", "internal/review/monitor", true},
		{"policy/route", "internal/review/alarms", true},
		{"policy/route", "policy/guardrails", false},
		{"policy/limits", "policy/limits/store", true},
		{"policy/limits/redisstore", "policy/cache", false},
		{"evaluation", "internal/review/record", false},
		{"internal/ttlstore/inredis", "policy/cache", false},
		{"internal/gatewaytest", "handlers", true},
		{"internal/review/record", "net/http", false},
		{"internal/review/record", "encoding/json", true},
		{"internal/review/calibrate", "net/http", false},
		{"internal/review/replay", "net/http", true},
	} {
		if got := forbidden(c.pkg, c.imp) == ""; got != c.ok {
			t.Errorf("%s importing %s: allowed %v, want %v", c.pkg, c.imp, got, c.ok)
		}
	}
}

// maxLines is the most lines a Go file of the repository holds.
const maxLines = 600

// testFileLength fails on each Go file over maxLines lines, generated
// files ("// Code generated ... DO NOT EDIT.") aside.
func testFileLength(t *testing.T) {
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if generated.Match(b) {
			return nil
		}
		if n := bytes.Count(b, []byte("\n")); n > maxLines {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s: %d lines, over %d", rel, n, maxLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// generated matches the line that marks a generated Go file.
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// roomMap is the page's map: room paths by floor (0 is the top).
// "module.go" is the repository's root package; a path ending in "/..."
// holds every package under it that no other line names.
type roomMap map[string]int

func architectureRooms(t *testing.T) roomMap {
	t.Helper()
	text := read(t, "docs/architecture.md")
	start := strings.Index(text, "```text\n")
	if start < 0 {
		t.Fatal("docs/architecture.md has no ```text map")
	}
	block := text[start+len("```text\n"):]
	block = block[:strings.Index(block, "```")]
	rooms := roomMap{}
	for line := range strings.SplitSeq(strings.TrimRight(block, "\n"), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		path := strings.Fields(trimmed)[0]
		if path == "module.go" {
			path = ""
		}
		rooms[path] = (len(line) - len(trimmed)) / 2
	}
	return rooms
}

// floor is the floor of the room pkg is in: the line naming it, else the
// longest "/..." line it lies under.
func (r roomMap) floor(pkg string) (int, bool) {
	if f, ok := r[pkg]; ok {
		return f, true
	}
	best, floor := -1, 0
	for path, f := range r {
		prefix, ok := strings.CutSuffix(path, "/...")
		if ok && (pkg == prefix || strings.HasPrefix(pkg, prefix+"/")) && len(prefix) > best {
			best, floor = len(prefix), f
		}
	}
	return floor, best >= 0
}

// TestReadmeLayout holds the README's layout table to the tree: every path
// it names exists, and every package lies under a path it names.
func TestReadmeLayout(t *testing.T) {
	text := read(t, "README.md")
	start := strings.Index(text, "## Layout")
	if start < 0 {
		t.Fatal("README.md has no Layout section")
	}
	var paths []string
	for line := range strings.SplitSeq(text[start:], "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell := strings.SplitN(line, "|", 3)[1]
		parent := ""
		for i, name := range strings.Split(cell, ",") {
			name = strings.Trim(strings.TrimSpace(name), "`/")
			if i > 0 && !strings.Contains(name, "/") && parent != "" {
				name = parent + "/" + name // `policy/limits/store`, `memstore`: siblings
			}
			if i == 0 {
				parent = name[:max(strings.LastIndex(name, "/"), 0)]
			}
			if _, err := os.Stat(filepath.Join(root, name)); err != nil {
				t.Errorf("README layout: %s does not exist", name)
			}
			paths = append(paths, name)
		}
	}
	cmd := exec.Command("go", "list", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		pkg = strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if pkg == "" {
			pkg = "module.go"
		}
		if !slices.ContainsFunc(paths, func(p string) bool { return pkg == p || strings.HasPrefix(pkg, p+"/") }) {
			t.Errorf("README layout: no row names package %s or a folder above it", pkg)
		}
	}
}
