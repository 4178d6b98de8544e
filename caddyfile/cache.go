package caddyfile

import (
	"math"

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
	at := blockErr(d)
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	cfg := new(cache.Config)
	if err := block(d, func(name string) (err error) {
		switch name {
		case "ttl":
			cfg.TTL, err = durationArg(d)
		case "max_entries":
			// The range is package cache's (Validate); 0 would read as
			// the default, so it is refused here.
			var n *int64
			if n, err = countArg(d); err == nil {
				if *n == 0 || *n > cache.MaxMaxEntries {
					return d.Errf("max_entries %d: must be from 1 to %d", *n, cache.MaxMaxEntries)
				}
				cfg.MaxEntries = int(*n)
			}
		case "max_size":
			var size uint64
			if size, err = sizeArg(d); err == nil {
				if size == 0 || size > math.MaxInt64 {
					return d.Errf("max_size must be a positive size")
				}
				cfg.MaxSize = int64(size)
			}
		default:
			return d.Errf("unknown cache subdirective %q", name)
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
