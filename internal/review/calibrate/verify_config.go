package calibrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/systemone/systemone-gateway/internal/review/certificate"
	"github.com/systemone/systemone-gateway/policy/route"
)

// verifyConfig compares the cert ids of every systemone route block of the
// Caddyfile at path with certs, as the route policy does when its block
// names a certificates file, printing a line per mismatch and one in
// total. It returns the number of mismatches; a Caddyfile with no cert id
// to compare is an error.
func verifyConfig(out io.Writer, path string, certs []certificate.Certificate, certsPath string) (int, error) {
	routes, err := adaptedRoutes(path)
	if err != nil {
		return 0, err
	}
	mismatches, checked := 0, 0
	for _, r := range routes {
		found, n := r.CertificateMismatches(certs)
		checked += n
		for _, m := range found {
			mismatches++
			if _, err := fmt.Fprintf(out, "mismatch %s: %v\n", path, m); err != nil {
				return 0, err
			}
		}
	}
	if checked == 0 {
		return 0, fmt.Errorf("%s has no cert <id> on a threshold line to compare with %s", path, certsPath)
	}
	if mismatches == 0 {
		_, err = fmt.Fprintf(out, "ok %s: every cert id (%d) is a certificate in %s of its line's group and threshold\n", path, checked, certsPath)
	}
	return mismatches, err
}

// adaptedRoutes adapts the Caddyfile at path, as `caddy adapt` does, and
// returns the route config of each systemone handler in it.
func adaptedRoutes(path string) ([]route.Config, error) {
	adapter := caddyconfig.GetAdapter("caddyfile")
	if adapter == nil {
		return nil, errors.New("no caddyfile adapter in this binary")
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	adapted, _, err := adapter.Adapt(text, map[string]any{"filename": path})
	if err != nil {
		return nil, fmt.Errorf("adapting %s: %v", path, err)
	}
	var doc any
	if err := json.Unmarshal(adapted, &doc); err != nil {
		return nil, err
	}
	var routes []route.Config
	for _, raw := range routeBlocks(doc) {
		var cfg route.Config
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, fmt.Errorf("%s: a route block: %v", path, err)
		}
		routes = append(routes, cfg)
	}
	return routes, nil
}

// routeBlocks returns the "route" of every object under v whose handler is
// systemone, wherever the config nests it (routes, subroutes, handle
// blocks).
func routeBlocks(v any) []json.RawMessage {
	var out []json.RawMessage
	switch v := v.(type) {
	case map[string]any:
		if r, ok := v["route"]; ok && v["handler"] == "systemone" {
			raw, _ := json.Marshal(r) // decoded from JSON: it encodes
			out = append(out, raw)
		}
		for _, child := range v {
			out = append(out, routeBlocks(child)...)
		}
	case []any:
		for _, child := range v {
			out = append(out, routeBlocks(child)...)
		}
	}
	return out
}
