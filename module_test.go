package systemone

import (
	"encoding/json"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

// TestDefaultCaddyfileLoads: the embedded default adapts without warnings
// and provisions (the buffered log writer included) as the binary would
// run it.
func TestDefaultCaddyfileLoads(t *testing.T) {
	out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt(DefaultCaddyfile, map[string]any{"filename": "Caddyfile"})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("adapt: %v %v", err, warnings)
	}
	var cfg caddy.Config
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&cfg); err != nil {
		t.Fatalf("validate: %v", err)
	}
}

// TestCommandsRegistered: the binary has the review loop's subcommands,
// registered here beside the modules (the packages that define them
// register nothing when imported).
func TestCommandsRegistered(t *testing.T) {
	for _, name := range []string{"calibrate", "verify", "replay"} {
		if c, ok := caddycmd.Commands()[name]; !ok || c.CobraFunc == nil {
			t.Errorf("no %s command", name)
		}
	}
}
