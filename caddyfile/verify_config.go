package caddyfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/systemone/systemone-gateway/internal/review/certificate"
	"github.com/systemone/systemone-gateway/policy/route"
)

// CertificateMismatches adapts the Caddyfile at path, as `caddy adapt`
// does, and compares the cert ids of every systemone route block in it
// with certs, as the route policy does when its block names a certificates
// file: one error per threshold line (of a pin or an escalate block) whose
// id is missing from certs or belongs to another group or threshold, one
// per escalate line whose certificate was computed under another threshold
// of the first version than its pin holds (route.Config.StageMismatches,
// which the gateway only logs at load), and the number of lines with a
// cert id compared. It is `verify --config`'s check, given to the review
// loop's commands by the binary, so that they import no policy.
func CertificateMismatches(path string, certs []certificate.Certificate) (mismatches []error, checked int, err error) {
	routes, err := adaptedRoutes(path)
	if err != nil {
		return nil, 0, err
	}
	for _, r := range routes {
		found, n := r.CertificateMismatches(certs)
		mismatches = append(mismatches, found...)
		mismatches = append(mismatches, r.StageMismatches(certs)...)
		checked += n
	}
	return mismatches, checked, nil
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
