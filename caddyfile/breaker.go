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
	at := sectionAt(d)
	cfg := new(breaker.Config)
	if err := block(d, func(name string) (err error) {
		switch name {
		case "failures":
			cfg.Failures, err = uint32Arg(d)
		case "open_for":
			cfg.OpenFor, err = durationArg(d)
		case "half_open":
			cfg.HalfOpen, err = uint32Arg(d)
		default:
			return d.Errf("unknown breaker subdirective %q", name)
		}
		return err
	}); err != nil {
		return nil, err
	}
	return cfg, at.wrap(cfg.Validate())
}
