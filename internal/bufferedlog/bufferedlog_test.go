package bufferedlog

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile" // the Caddyfile adapter
	_ "github.com/caddyserver/caddy/v2/modules/logging"           // the file writer
)

// TestEntriesWaitUntilFlushedOrStopped: through Caddy, an entry written to
// a buffered file log is not in the file while the buffer holds it, and is
// there once Caddy stops (the writer is closed, which flushes).
func TestEntriesWaitUntilFlushedOrStopped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.log")
	cfg := `{
	admin off
	persist_config off
	log default {
		output buffered {
			size           1MiB
			flush_interval 1h
			output file ` + path + `
		}
		format json
	}
}
`
	json, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfg), nil)
	if err != nil {
		t.Fatalf("adapt: %v (%v)", err, warnings)
	}
	for _, want := range []string{`"output":"buffered"`, `"writer":{`, `"output":"file"`, `"size":1048576`, `"flush_interval":3600000000000`} {
		if !strings.Contains(string(json), want) {
			t.Fatalf("adapted config lacks %s:\n%s", want, json)
		}
	}
	if err := caddy.Load(json, true); err != nil {
		t.Fatalf("load: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = caddy.Stop()
		}
	})
	caddy.Log().Named("bufferedlog.test").Info("an entry held back")

	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), "an entry held back") {
		t.Fatalf("the entry reached the file before any flush:\n%s", data)
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	data, err = os.ReadFile(path)
	if err != nil || !strings.Contains(string(data), "an entry held back") {
		t.Fatalf("after the stop the file holds %q (%v), want the entry", data, err)
	}
}

// TestCaddyfileErrors: the writer's own settings are checked where they are
// written.
func TestCaddyfileErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"buffered", "missing output"},
		{"buffered {\n size 0\n output stderr\n}", "want a size"},
		{"buffered {\n size 1GiB\n output stderr\n}", "want a size"},
		{"buffered {\n flush_interval -1s\n output stderr\n}", "positive duration"},
		{"buffered {\n output nosuchwriter\n}", "nosuchwriter"},
		{"buffered {\n colour blue\n output stderr\n}", "unrecognized subdirective"},
		{"buffered extra {\n output stderr\n}", "wrong argument count"},
	} {
		var w Writer
		err := w.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.want)
		}
	}
	var w Writer
	if err := w.UnmarshalCaddyfile(caddyfile.NewTestDispenser("buffered {\n output stderr\n}")); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if w.size() != DefaultSize || w.flushInterval() != DefaultFlushInterval {
		t.Fatalf("size %d, flush_interval %s: want the defaults", w.size(), w.flushInterval())
	}
}

// TestFailedProvisionCleansUp: Caddy calls Cleanup on a module whose
// Provision failed; that must not panic.
func TestFailedProvisionCleansUp(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	for _, cfg := range []string{`{"size":-1,"writer":{"output":"stderr"}}`, `{}`} {
		if _, err := ctx.LoadModuleByID("caddy.logging.writers.buffered", []byte(cfg)); err == nil {
			t.Errorf("%s: loaded, want a provisioning error", cfg)
		}
	}
	var w Writer
	if err := w.Cleanup(); err != nil || w.String() == "" {
		t.Fatalf("cleanup of an unprovisioned writer: %v", err)
	}
}
