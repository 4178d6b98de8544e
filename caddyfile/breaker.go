package caddyfile

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/systemone/systemone-gateway/policy/breaker"
)

// parseBreaker parses the `breaker` block; package breaker validates it.
func parseBreaker(d *caddyfile.Dispenser) (*breaker.Config, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	at := blockErr(d)
	cfg := new(breaker.Config)
	if err := block(d, func(name string) (err error) {
		switch name {
		case "failures":
			cfg.Failures, err = countOf(d, breaker.Count)
		case "open_for":
			cfg.OpenFor, err = durationArg(d)
		case "half_open":
			cfg.HalfOpen, err = countOf(d, breaker.Count)
		default:
			return d.Errf("unknown breaker subdirective %q", name)
		}
		return err
	}); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, at(err)
	}
	return cfg, nil
}
