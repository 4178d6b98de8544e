package caddyfile

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/systemone/systemone-gateway/policy/cache"
)

// parseCache parses the `cache` block; package cache validates it and holds
// its defaults:
//
//	cache {
//		ttl         <duration>   # default 10m
//		max_entries <n>          # in process only; default 10000
//		max_size    <size>       # largest body stored; default 1MiB, at most 8MiB
//	}
func parseCache(d *caddyfile.Dispenser) (*cache.Config, error) {
	at := sectionAt(d)
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	cfg := new(cache.Config)
	if err := block(d, func(name string) (err error) {
		switch name {
		case "ttl":
			cfg.TTL, err = durationArg(d)
		case "max_entries":
			var n int64
			n, err = nonZeroArg(d)
			cfg.MaxEntries = int(n)
		case "max_size":
			cfg.MaxSize, err = sizeArg(d)
		default:
			return d.Errf("unknown cache subdirective %q", name)
		}
		return err
	}); err != nil {
		return nil, err
	}
	return cfg, at.wrap(cfg.Validate())
}
