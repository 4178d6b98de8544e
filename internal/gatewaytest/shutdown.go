package gatewaytest

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() { caddy.RegisterModule(shutdownWatch{}) }

// shutdownWatch is a Caddy app loaded with every test config. It tells
// Reload when the replaced config's servers have closed their listeners:
// Caddy returns from a reload once the old servers' shutdowns are started,
// not done, so without it a new connection may still reach the old config
// (its server and the new one accept from one shared listener meanwhile).
type shutdownWatch struct {
	closed *sync.WaitGroup
}

// running is the watch of the config serving now.
var running struct {
	sync.Mutex
	closed *sync.WaitGroup
}

func (shutdownWatch) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "gatewaytest_shutdown", New: func() caddy.Module { return new(shutdownWatch) }}
}

// Provision registers on each HTTP server before the http app starts them:
// Go's http.Server runs its shutdown hooks once its listeners are closed.
func (w *shutdownWatch) Provision(ctx caddy.Context) error {
	app, err := ctx.App("http")
	if err != nil {
		return err
	}
	w.closed = new(sync.WaitGroup)
	for _, s := range app.(*caddyhttp.App).Servers {
		w.closed.Add(1)
		s.RegisterOnShutdown(w.closed.Done)
	}
	return nil
}

func (w *shutdownWatch) Start() error {
	running.Lock()
	running.closed = w.closed
	running.Unlock()
	return nil
}

func (*shutdownWatch) Stop() error { return nil }

// withShutdownWatch adds the watch to a JSON config.
func withShutdownWatch(t testing.TB, config []byte) []byte {
	t.Helper()
	var c map[string]any
	if err := json.Unmarshal(config, &c); err != nil {
		t.Fatal(err)
	}
	apps, _ := c["apps"].(map[string]any)
	if apps == nil {
		apps = map[string]any{}
		c["apps"] = apps
	}
	apps["gatewaytest_shutdown"] = map[string]any{}
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// serving returns the listeners-closed signal of the config serving now.
func serving() *sync.WaitGroup {
	running.Lock()
	defer running.Unlock()
	return running.closed
}

// awaitClosed waits until the servers of a replaced config have closed
// their listeners.
func awaitClosed(t testing.TB, closed *sync.WaitGroup) {
	t.Helper()
	if closed == nil {
		return
	}
	done := make(chan struct{})
	go func() { closed.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the replaced config's servers did not close their listeners within 10s")
	}
}
