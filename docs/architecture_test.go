package docs

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/systemone/systemone-gateway"

// TestArchitecture holds docs/architecture.md to the code: every package of
// the gateway (outside bench/ and deploy/) is in a room the page's map
// names, and no package imports a room on a floor above its own.
func TestArchitecture(t *testing.T) {
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
