package caddyfile

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/systemone/systemone-gateway/policy/breaker"
)

// parseBreaker parses the `breaker` block.
func parseBreaker(d *caddyfile.Dispenser) (*breaker.Config, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	cfg := new(breaker.Config)
	if err := block(d, func(name string) (err error) {
		var n *int64
		switch name {
		case "failures":
			if n, err = positiveArg(d); err == nil {
				cfg.Failures = uint32(*n)
			}
		case "open_for":
			cfg.OpenFor, err = durationArg(d)
		case "half_open":
			if n, err = positiveArg(d); err == nil {
				cfg.HalfOpen = uint32(*n)
			}
		default:
			return d.Errf("unknown breaker subdirective %q", name)
		}
		return err
	}); err != nil {
		return nil, err
	}
	return cfg, nil
}
