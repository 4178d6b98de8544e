package docs

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// exampleCaddyfile is a whole Caddyfile an operator runs or copies.
type exampleCaddyfile struct {
	name, text string
}

// exampleCaddyfiles are the root Caddyfile, every Caddyfile under deploy/,
// and the docs' whole-Caddyfile blocks.
func exampleCaddyfiles(t *testing.T) []exampleCaddyfile {
	t.Helper()
	out := []exampleCaddyfile{{"Caddyfile", read(t, "Caddyfile")}}
	err := filepath.WalkDir(filepath.Join(root, "deploy"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(d.Name(), "Caddyfile") {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out = append(out, exampleCaddyfile{rel, read(t, rel)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range allBlocks(t) {
		if b.lang == "caddyfile" && !b.has("in-site") && !b.has("in-systemone") {
			out = append(out, exampleCaddyfile{b.String(), b.text})
		}
	}
	return out
}

// Every example Caddyfile is as `systemone-gateway fmt` writes it, so that
// running one never logs "Caddyfile input is not formatted".
func TestExampleCaddyfilesFormatted(t *testing.T) {
	files := exampleCaddyfiles(t)
	for _, f := range files {
		if formatted := caddyfile.Format([]byte(f.text)); !bytes.Equal(formatted, []byte(f.text)) {
			t.Errorf("%s is not formatted: run systemone-gateway fmt on it; formatted, it reads:\n%s", f.name, formatted)
		}
	}
	if len(files) < 4 {
		t.Errorf("%d example Caddyfiles found: is the search broken?", len(files))
	}
}

// The simulator in every example listens on loopback only: it accepts any
// key, so it must not be reachable from other machines.
func TestExampleSimulatorsOnLoopback(t *testing.T) {
	checked := 0
	for _, f := range exampleCaddyfiles(t) {
		if !strings.Contains(f.text, "systemone_simulator") {
			continue
		}
		cfgJSON, err := adaptFile(f.text, filepath.Join(root, f.name))
		if err != nil {
			t.Errorf("%s does not adapt: %v", f.name, err)
			continue
		}
		var cfg struct {
			Apps struct {
				HTTP struct {
					Servers map[string]struct {
						Listen []string        `json:"listen"`
						Routes json.RawMessage `json:"routes"`
					} `json:"servers"`
				} `json:"http"`
			} `json:"apps"`
		}
		if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
			t.Fatal(err)
		}
		for name, srv := range cfg.Apps.HTTP.Servers {
			if !bytes.Contains(srv.Routes, []byte(`"handler":"systemone_simulator"`)) {
				continue
			}
			checked++
			for _, addr := range srv.Listen {
				if !loopback(addr) {
					t.Errorf("%s: the simulator's server %s listens on %s: bind it to 127.0.0.1", f.name, name, addr)
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no example runs the simulator: is the search broken?")
	}
}

// loopback reports whether a Caddy listen address ("tcp/127.0.0.1:9080",
// ":9080") is a loopback IP: a name such as localhost is left to the
// machine's resolver, so it does not count.
func loopback(addr string) bool {
	if i := strings.Index(addr, "/"); i >= 0 {
		addr = addr[i+1:]
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// The walk-through's Redis listens on loopback only, and it leaves no
// trace in the clone: its first block makes a scratch directory with
// mktemp and moves there, and everything it builds goes there.
// (deploy/examples/review-loop's TestWalkthrough runs it and compares the
// clone's git status before and after.)
func TestWalkthroughLeavesNoTrace(t *testing.T) {
	text := read(t, "docs/walkthrough.md")
	bs, _ := blocks("docs/walkthrough.md", text)
	built := regexp.MustCompile(`go build -o (\S+)`)
	redis, builds, shells := 0, 0, 0
	for _, b := range bs {
		if b.lang != "sh" {
			continue
		}
		if shells++; shells == 1 && (!strings.Contains(b.text, "walk=$(mktemp -d)") || !strings.Contains(b.text, "cd \"$walk\"")) {
			t.Errorf("%s: the first block does not move to a scratch directory (walk=$(mktemp -d), cd \"$walk\")", b)
		}
		for _, c := range strings.Split(b.text, "\n") {
			if strings.HasPrefix(c, "redis-server") {
				redis++
				if !regexp.MustCompile(`--bind 127\.0\.0\.1(\s|$)`).MatchString(c) {
					t.Errorf("%s: %q listens on every interface: add --bind 127.0.0.1", b, c)
				}
			}
			for _, m := range built.FindAllStringSubmatch(c, -1) {
				builds++
				if !strings.HasPrefix(m[1], `"$walk/`) {
					t.Errorf("%s: %q builds %s, in the clone: build into \"$walk/\"", b, c, m[1])
				}
			}
		}
	}
	if redis == 0 || builds == 0 {
		t.Errorf("found %d redis-server and %d go build lines in the walk-through: is the search broken?", redis, builds)
	}
}
