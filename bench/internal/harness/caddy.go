package harness

import (
	"fmt"
	"os"
	"path/filepath"
)

// StartSimulator starts the simulated service (no latency, no limits) as
// a Caddy process of its own from bin, in dir, and returns it and its base
// URL.
func StartSimulator(dir, bin string) (*Process, string, error) {
	port, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	admin, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	file, err := writeFile(dir, "simulator.Caddyfile", simulatorCaddyfile(port, admin, dir, Options{}))
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := startCaddy("simulator", dir, bin, file, []string{addr})
	return p, "http://" + addr, err
}

// StartCaddy runs bin with the Caddyfile body (saved as dir/<name>.Caddyfile,
// after the stack's global options: admin on a free port, one buffered
// JSON log at dir/<name>.caddy.log) and waits until every one of addrs
// listens.
func StartCaddy(name, dir, bin, body string, addrs []string) (*Process, error) {
	admin, err := FreePort()
	if err != nil {
		return nil, err
	}
	file, err := writeFile(dir, name+".Caddyfile", globalOptions(admin, dir, name, Options{})+body)
	if err != nil {
		return nil, err
	}
	return startCaddy(name, dir, bin, file, addrs)
}

// writeFile writes data to dir/name and returns its path.
func writeFile(dir, name, data string) (string, error) {
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, []byte(data), 0o644)
}
