package docs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDockerignoreKeepsBuildOutputsOut: every build output .gitignore
// keeps out of the repository stays out of the image's build context too,
// with the certificates file `calibrate --certificates` writes where it runs.
func TestDockerignoreKeepsBuildOutputsOut(t *testing.T) {
	patterns := func(name string) []string {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(string(data), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				out = append(out, l)
			}
		}
		return out
	}
	docker := patterns(".dockerignore")
	for _, want := range append(patterns(".gitignore"), ".git", "certs.jsonl", "/systemone-gateway", "/reviewer", "/load", "/soak", "/reviewload", "/bench/out/", "*.test", "*.prof") {
		if !slices.Contains(docker, want) {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}
}
