package docs

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"net"
	"os"
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
		cfgJSON, err := adapt(f.text)
		if err != nil {
			continue // TestCaddyfileExamplesAdapt reports it
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

// The walk-through's Redis listens on loopback only, and what it builds in
// the clone is ignored by git.
func TestWalkthroughLeavesNoTrace(t *testing.T) {
	text := read(t, "docs/walkthrough.md")
	bs, _ := blocks("docs/walkthrough.md", text)
	ignored := map[string]bool{}
	for _, l := range strings.Split(read(t, ".gitignore"), "\n") {
		ignored[strings.TrimSpace(l)] = true
	}
	built := regexp.MustCompile(`go build -o (\S+)`)
	redis, builds := 0, 0
	for _, b := range bs {
		for _, c := range strings.Split(b.text, "\n") {
			if strings.HasPrefix(c, "redis-server") {
				redis++
				if !regexp.MustCompile(`--bind 127\.0\.0\.1(\s|$)`).MatchString(c) {
					t.Errorf("%s: %q listens on every interface: add --bind 127.0.0.1", b, c)
				}
			}
			for _, m := range built.FindAllStringSubmatch(c, -1) {
				builds++
				if !ignored["/"+strings.TrimPrefix(m[1], "./")] {
					t.Errorf("%s: %q builds %s, which .gitignore does not name (as /%s)", b, c, m[1], strings.TrimPrefix(m[1], "./"))
				}
			}
		}
	}
	if redis == 0 || builds == 0 {
		t.Errorf("found %d redis-server and %d go build lines in the walk-through: is the search broken?", redis, builds)
	}
	if _, err := os.Stat(filepath.Join(root, ".gitignore")); err != nil {
		t.Fatal(err)
	}
}
