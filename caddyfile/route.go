package caddyfile

import (
	"strconv"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/systemone/systemone-gateway/policy/route"
)

// parseRoute parses the `route` block; package route validates it.
func parseRoute(d *caddyfile.Dispenser) (*route.Config, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	at := blockErr(d)
	cfg := new(route.Config)
	if err := block(d, func(name string) (err error) {
		switch name {
		case "pin":
			err = parsePin(d, cfg)
		case "unpinned":
			cfg.Unpinned, err = oneOf(d, route.Routes)
		case "queue":
			err = parseQueue(d, cfg)
		case "audit":
			err = parseAudit(d, cfg)
		case "on_alarm":
			cfg.OnAlarm, err = oneOf(d, route.OnAlarms)
		case "include_content":
			if d.NextArg() {
				return d.ArgErr()
			}
			cfg.IncludeContent = true
		case "max_content":
			var size uint64
			if size, err = sizeArg(d); err == nil {
				if size == 0 || size > 1<<40 {
					return d.Errf("max_content %d bytes: want 1KiB or more (and at most 1TiB)", size)
				}
				cfg.MaxContent = int64(size)
			}
		default:
			return d.Errf("unknown route subdirective %q", name)
		}
		return err
	}, "pin"); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, at(err)
	}
	return cfg, nil
}

func parsePin(d *caddyfile.Dispenser, cfg *route.Config) error {
	version, err := stringArg(d)
	if err != nil {
		return err
	}
	for _, p := range cfg.Pins {
		if p.Version == version {
			return d.Errf("version %q is pinned twice", version)
		}
	}
	pin := route.Pin{Version: version}
	if err := block(d, func(name string) (err error) {
		switch name {
		case "noul":
			pin.Noul, err = thresholdArg(d)
		case "choice":
			pin.Choice, err = thresholdArg(d)
		case "score":
			pin.Score, err = thresholdArg(d)
		case "question":
			var id string
			var t *float64
			if id, err = stringArg(d); err != nil {
				return err
			}
			if t, err = thresholdArg(d); err != nil {
				return err
			}
			if _, dup := pin.Questions[id]; dup {
				return d.Errf("question %q has two thresholds in pin %q", id, version)
			}
			if pin.Questions == nil {
				pin.Questions = map[string]float64{}
			}
			pin.Questions[id] = *t
		default:
			return d.Errf("unknown pin subdirective %q", name)
		}
		return err
	}, "question"); err != nil {
		return err
	}
	cfg.Pins = append(cfg.Pins, pin)
	return nil
}

// parseQueue parses `queue <stream> [maxlen <n>]`. The include_content
// that the first version took on this line is still read, as the route
// block's own.
func parseQueue(d *caddyfile.Dispenser, cfg *route.Config) error {
	stream, err := stringArg(d)
	if err != nil {
		return err
	}
	q := &route.Queue{Stream: stream}
	for d.NextArg() {
		switch d.Val() {
		case "maxlen":
			if q.MaxLen != 0 {
				return d.Err("duplicate maxlen")
			}
			v, err := resolvedArg(d)
			if err != nil {
				return err
			}
			if q.MaxLen, err = strconv.ParseInt(v, 10, 64); err != nil || q.MaxLen < 1 {
				return d.Errf("maxlen %q is not a whole number >= 1", v)
			}
		case "include_content":
			cfg.IncludeContent = true
		default:
			return d.Errf("queue takes a stream, then maxlen <n>, not %q", d.Val())
		}
	}
	cfg.Queue = q
	return nil
}

// parseAudit parses `audit <fraction>` (the uniform audit) or `audit active
// <share> [floor <p>] [from <confidence>]` (the active audit); package
// route checks the ranges.
func parseAudit(d *caddyfile.Dispenser, cfg *route.Config) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	if d.Val() != "active" {
		d.Prev()
		var err error
		cfg.Audit, err = fractionArg(d)
		return err
	}
	a := new(route.ActiveAudit)
	var err error
	if a.MaxShare, err = numberArg(d); err != nil {
		return err
	}
	seen := map[string]bool{}
	for d.NextArg() {
		name := d.Val()
		if name != "floor" && name != "from" {
			return d.Errf("audit active takes a share, then floor <p> and from <confidence>, not %q", name)
		}
		if seen[name] {
			return d.Errf("duplicate %s", name)
		}
		seen[name] = true
		v, err := numberArg(d)
		if err != nil {
			return err
		}
		if name == "floor" {
			if v == 0 {
				return d.Err("audit active: floor 0 would leave answers no chance of a label; the weighted calibration needs every chance above 0")
			}
			a.Floor = v
		} else {
			a.From = &v
		}
	}
	cfg.ActiveAudit = a
	return nil
}
