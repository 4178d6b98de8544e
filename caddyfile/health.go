package caddyfile

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/systemone/systemone-gateway/handlers"
)

func parseHealth(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	health := new(handlers.Health)
	if err := UnmarshalHealth(h.Dispenser, health); err != nil {
		return nil, err
	}
	return health, nil
}

// UnmarshalHealth parses a `systemone_health` directive, the readiness
// endpoint (see handlers.Health):
//
//	systemone_health {
//		timeout <duration>
//	}
func UnmarshalHealth(d *caddyfile.Dispenser, health *handlers.Health) error {
	d.Next() // the directive's name
	if d.NextArg() {
		return d.ArgErr()
	}
	if err := block(d, func(name string) (err error) {
		switch name {
		case "timeout":
			health.Timeout, err = durationArg(d)
		default:
			return d.Errf("unknown systemone_health subdirective %q", name)
		}
		return err
	}); err != nil {
		return err
	}
	return health.Validate()
}
