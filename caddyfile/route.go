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
		case "org_fallback":
			cfg.OrgFallback, err = resolvedArg(d)
			if err == nil && d.NextArg() {
				err = d.ArgErr()
			}
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
	at := lineErr(d)
	pin := route.Pin{Version: version}
	if err := block(d, func(name string) (err error) {
		switch name {
		case "noul":
			pin.Noul, pin.NoulCert, err = thresholdLine(d)
		case "choice":
			pin.Choice, pin.ChoiceCert, err = thresholdLine(d)
		case "score":
			pin.Score, pin.ScoreCert, err = thresholdLine(d)
		case "question":
			err = parseQuestionLine(d, &pin)
		case "org":
			err = parseOrgLines(d, &pin)
		default:
			return d.Errf("unknown pin subdirective %q", name)
		}
		return err
	}, "question", "org"); err != nil {
		return err
	}
	// Checked here too, not only with the whole block, to name the pin's
	// line.
	if err := pin.Validate(); err != nil {
		return at(err)
	}
	cfg.Pins = append(cfg.Pins, pin)
	return nil
}

// parseQuestionLine parses `question <id> <threshold> [cert <id>]`.
func parseQuestionLine(d *caddyfile.Dispenser, pin *route.Pin) error {
	id, err := stringArg(d)
	if err != nil {
		return err
	}
	t, cert, err := thresholdLine(d)
	if err != nil {
		return err
	}
	if _, dup := pin.Questions[id]; dup {
		return d.Errf("question %q has two thresholds in pin %q", id, pin.Version)
	}
	if pin.Questions == nil {
		pin.Questions = map[string]float64{}
	}
	pin.Questions[id] = *t
	if cert != "" {
		if pin.QuestionCerts == nil {
			pin.QuestionCerts = map[string]string{}
		}
		pin.QuestionCerts[id] = cert
	}
	return nil
}

// parseOrgLines parses `org <name> { <type> <threshold> [cert <id>] | <type>
// human ... }`. Each line becomes one route.OrgLine as written, a
// repeated or unknown type included: package route refuses those, with
// the words a JSON config gets.
func parseOrgLines(d *caddyfile.Dispenser, pin *route.Pin) error {
	name, err := stringArg(d)
	if err != nil {
		return err
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	org := route.OrgPin{Org: name}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		l := route.OrgLine{Type: d.Val()}
		if d.NextArg() {
			if d.Val() == route.OrgFallbackHuman {
				l.Human = true
				l.Cert, err = certArg(d)
			} else {
				d.Prev()
				l.Threshold, l.Cert, err = thresholdLine(d)
			}
			if err != nil {
				return err
			}
		}
		org.Lines = append(org.Lines, l)
	}
	pin.Orgs = append(pin.Orgs, org)
	return nil
}

// thresholdLine reads `<threshold> [cert <id>]`, the end of every threshold
// line; package route checks the range and the id.
func thresholdLine(d *caddyfile.Dispenser) (*float64, string, error) {
	v, err := resolvedArg(d)
	if err != nil {
		return nil, "", err
	}
	t, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return nil, "", d.Errf("threshold %q is not a number", v)
	}
	cert, err := certArg(d)
	return &t, cert, err
}

// certArg reads the optional `cert <id>` that ends a line, placeholders in
// the id resolved.
func certArg(d *caddyfile.Dispenser) (string, error) {
	if !d.NextArg() {
		return "", nil
	}
	if d.Val() != "cert" {
		return "", d.Errf("a threshold line ends with cert <id> or nothing, not %q", d.Val())
	}
	cert, err := resolvedArg(d)
	if err != nil {
		return "", err
	}
	if d.NextArg() {
		return "", d.ArgErr()
	}
	return cert, nil
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
