// Command systemone-gateway is Caddy with the standard modules and the
// systemone gateway's. All Caddy subcommands work. `run` with no --config
// and no Caddyfile in the working directory serves the embedded default
// (the repository's root Caddyfile).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	systemone "github.com/systemone/systemone-gateway"
)

func main() {
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
		if arg == "--config" || arg == "-config" || len(arg) > 9 && (arg[:9] == "--config=" || arg[:8] == "-config=") {
			return nil
		}
	}
	if _, err := os.Stat("Caddyfile"); err == nil {
		return nil
	}
	path := filepath.Join(os.TempDir(), "systemone-gateway.Caddyfile")
	if err := os.WriteFile(path, systemone.DefaultCaddyfile, 0o644); err != nil {
		return fmt.Errorf("writing the embedded Caddyfile: %v", err)
	}
	os.Args = append(os.Args, "--config", path, "--adapter", "caddyfile")
	return nil
}
