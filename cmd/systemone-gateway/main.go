// Command systemone-gateway is Caddy with the standard modules and the
// systemone gateway's. All Caddy subcommands work. `run` with no --config
// and no Caddyfile in the working directory serves the embedded default
// (the repository's root Caddyfile).
package main

import (
	"fmt"
	"os"
	"strings"
	_ "time/tzdata" // budget_timezone works on hosts and images without a zoneinfo database

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	systemone "github.com/systemone/systemone-gateway"
	"github.com/systemone/systemone-gateway/internal/cli"
)

// longDescription is the root command's help: this product first, then
// where Caddy's own commands are documented.
const longDescription = `systemone-gateway is an edge gateway for the systemone evaluation service:
Caddy v2 with its standard modules and the gateway's (the systemone and
systemone_review directives, the systemone_simulator upstream).

Serve a Caddyfile:

	systemone-gateway run --config Caddyfile

The review loop's commands:

	systemone-gateway calibrate   thresholds from the review API's labels
	systemone-gateway verify      checks calibrate's certificates
	systemone-gateway replay      re-asks labelled requests to a new version

Documentation: README.md and docs/ in the systemone-gateway repository
(docs/configuration.md for the Caddyfile, docs/calibration.md for the
review loop's commands, docs/operations.md for running it). Caddy's own
commands (run, adapt, reload, hash-password, ...) work as in Caddy:
https://caddyserver.com/docs/command-line
`

func main() {
	setMemoryDefaults()
	// The help and messages name this binary, not "caddy".
	caddy.CustomBinaryName = cli.Binary
	caddy.CustomLongDescription = longDescription
	if err := useDefaultConfig(); err != nil {
		fmt.Fprintln(os.Stderr, "systemone-gateway:", err)
		os.Exit(1)
	}
	caddycmd.Main()
}

// useDefaultConfig points a bare `run` at the embedded Caddyfile when the
// working directory has none, so the binary works from anywhere.
func useDefaultConfig() error {
	if len(os.Args) < 2 || os.Args[1] != "run" {
		return nil
	}
	for _, arg := range os.Args[2:] {
		name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if strings.HasPrefix(arg, "-") && (name == "c" || name == "config" || name == "resume") {
			return nil // the operator chose a config
		}
	}
	if _, err := os.Stat("Caddyfile"); err == nil {
		return nil
	}
	// A fresh, private file: never one another user could have planted.
	f, err := os.CreateTemp("", "systemone-gateway-*.Caddyfile")
	if err != nil {
		return fmt.Errorf("writing the embedded Caddyfile: %v", err)
	}
	defer f.Close()
	if _, err := f.Write(systemone.DefaultCaddyfile); err != nil {
		return fmt.Errorf("writing the embedded Caddyfile: %v", err)
	}
	os.Args = append(os.Args, "--config", f.Name(), "--adapter", "caddyfile")
	return nil
}
