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
