// Package gatewaytest runs the real Caddy server with the real modules
// in-process for end-to-end tests, in front of real upstream HTTP servers on
// loopback, and reads the gateway's structured log back.
package gatewaytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/systemone/systemone-gateway"
	"github.com/systemone/systemone-gateway/internal/redistest"
)

// Gateway is a loaded Caddy config.
type Gateway struct {
	logFile
	options string
}

// globals keeps the in-process server quiet and self-contained: no admin
// endpoint, no config written to disk, no HTTPS, and the systemone logger
// written as JSON to a file the test reads. The second verb takes more
// global options.
const globals = `{
	admin off
	persist_config off
	auto_https off
	grace_period 1s
	log default {
		level ERROR
	}
	log systemone {
		output file %s
		format json
		include http.handlers.systemone
	}
%s
}
`

// Load adapts the Caddyfile (sites only; the global options are added) and
// runs it in-process, replacing any config running before, as a reload
// does. Caddy runs one config per process: tests using Load must not be
// parallel. The server stops when the test ends.
func Load(t testing.TB, sites string) *Gateway {
	t.Helper()
	return LoadOptions(t, "", sites)
}

// LoadOptions is Load with more global options, such as a `servers` block
// or another `log`, written as they would be inside the global block.
func LoadOptions(t testing.TB, options, sites string) *Gateway {
	t.Helper()
	g := &Gateway{logFile: logFile{t: t, path: filepath.Join(t.TempDir(), "systemone.log")}, options: options}
	if err := caddy.Load(g.adapt(sites), true); err != nil {
		t.Fatalf("loading the config: %v", err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	return g
}

// Reload loads a new Caddyfile while the old one serves, as `caddy reload`
// does; the global options stay, the log keeps going to the same file. It
// returns once the old config's servers accept no more connections.
func (g *Gateway) Reload(sites string) {
	g.t.Helper()
	old := serving()
	if err := caddy.Load(g.adapt(sites), true); err != nil {
		g.t.Fatalf("reloading the config: %v", err)
	}
	awaitClosed(g.t, old)
}

// adapt turns sites, under the global options, into JSON config.
func (g *Gateway) adapt(sites string) []byte {
	g.t.Helper()
	return withShutdownWatch(g.t, adapt(g.t, fmt.Sprintf(globals, g.path, g.options)+sites))
}

func adapt(t testing.TB, caddyfileText string) []byte {
	t.Helper()
	adapter := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}
	cfg, warnings, err := adapter.Adapt([]byte(caddyfileText), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapting the Caddyfile: %v\n%s", err, caddyfileText)
	}
	for _, w := range warnings {
		if !strings.Contains(w.Message, "formatted") {
			t.Logf("caddyfile warning: %s", w.Message)
		}
	}
	return cfg
}

// logFile is the JSON log a gateway writes its systemone entries to.
type logFile struct {
	t    testing.TB
	path string
}

// Entries returns the gateway's `systemone request` log entries so far.
func (l logFile) Entries() []map[string]any {
	l.t.Helper()
	var out []map[string]any
	for _, e := range l.Log() {
		if e["msg"] == "systemone request" {
			out = append(out, e)
		}
	}
	return out
}

// Log returns every entry the systemone loggers wrote so far.
func (l logFile) Log() []map[string]any {
	l.t.Helper()
	data, err := os.ReadFile(l.path)
	if err != nil && !os.IsNotExist(err) {
		l.t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			l.t.Fatalf("log line is not JSON: %v: %s", err, sc.Bytes())
		}
		out = append(out, e)
	}
	return out
}

// RawLog returns the log file's bytes, for scans for secrets.
func (l logFile) RawLog() []byte {
	data, _ := os.ReadFile(l.path)
	return data
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int { return redistest.FreePort(t) }

// Recorded is one request as an upstream received it.
type Recorded struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

// Upstream is a real HTTP server on loopback that counts and records what
// reaches it.
type Upstream struct {
	*httptest.Server
	calls atomic.Int64
	mu    sync.Mutex
	seen  []Recorded
}

// NewUpstream serves h on a loopback port until the test ends.
func NewUpstream(t testing.TB, h http.Handler) *Upstream {
	u := &Upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.calls.Add(1)
		u.mu.Lock()
		u.seen = append(u.seen, Recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
		u.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

// Addr is host:port, for a Caddyfile's reverse_proxy.
func (u *Upstream) Addr() string { return strings.TrimPrefix(u.URL, "http://") }

// Calls is the number of requests that reached the upstream.
func (u *Upstream) Calls() int64 { return u.calls.Load() }

// Last returns the last request the upstream received.
func (u *Upstream) Last() Recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		return Recorded{}
	}
	return u.seen[len(u.seen)-1]
}

// WaitListening waits until addr accepts connections.
func WaitListening(t testing.TB, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not listening: %v", addr, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
