package review

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	handler := new(Handler)
	if err := handler.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	return handler, nil
}

// UnmarshalCaddyfile parses a `systemone_review` directive:
//
//	systemone_review {
//		redis      <url> [<url>...]
//		key_prefix <prefix>
//		stream     <name>
//	}
//
// redis and stream are required (Provision says so, after placeholders are
// resolved); key_prefix defaults to "systemone:".
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		name := d.Val()
		if seen[name] {
			return d.Errf("duplicate %s", name)
		}
		seen[name] = true
		switch name {
		case "redis":
			h.Redis = d.RemainingArgs()
			if len(h.Redis) == 0 {
				return d.ArgErr()
			}
		case "key_prefix", "stream":
			if !d.NextArg() {
				return d.ArgErr()
			}
			v := d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
			if v == "" {
				return d.Errf("%s: empty", name)
			}
			if name == "stream" {
				h.Stream = v
			} else {
				h.KeyPrefix = v
			}
		default:
			return d.Errf("unknown subdirective %q (want redis, key_prefix or stream)", name)
		}
		if d.NextBlock(1) {
			return d.Errf("%s takes no block", name)
		}
	}
	return nil
}

var _ caddyfile.Unmarshaler = (*Handler)(nil)
