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
	at := sectionAt(d)
	cfg := new(route.Config)
	var pinAt []section  // each pin's line
	var certsAt *section // the certificates line
	var escalates []section
	if err := block(d, func(name string) (err error) {
		switch name {
		case "pin":
			var pin section
			pin, err = parsePin(d, cfg, at)
			pinAt = append(pinAt, pin)
		case "certificates":
			here := at.here(d)
			certsAt = &here
			cfg.Certificates, err = stringArg(d)
		case "escalate":
			var here section
			here, err = parseEscalate(d, cfg, at)
			escalates = append(escalates, here)
		case "unpinned":
			cfg.Unpinned, err = wordArg(d)
		case "queue":
			err = parseQueue(d, cfg)
		case "audit":
			err = parseAudit(d, cfg)
		case "on_alarm":
			cfg.OnAlarm, err = wordArg(d)
		case "org_fallback":
			cfg.OrgFallback, err = wordArg(d)
		case "include_content":
			if d.NextArg() {
				return d.ArgErr()
			}
			cfg.IncludeContent = true
		case "max_content":
			cfg.MaxContent, err = sizeArg(d)
		default:
			return d.Errf("unknown route subdirective %q", name)
		}
		return err
	}, "pin", "escalate"); err != nil {
		return nil, err
	}
	if err := validateEscalations(cfg, escalates); err != nil {
		return nil, err
	}
	if certsAt != nil {
		// The certificates' faults at the lines they are of: the file's
		// own at its line, a certificate id's at its pin's.
		if err := certsAt.wrap((route.Config{Certificates: cfg.Certificates}).Validate()); err != nil {
			return nil, err
		}
		for i, pin := range cfg.Pins {
			if err := pinAt[i].wrap((route.Config{Pins: []route.Pin{pin}, Certificates: cfg.Certificates}).Validate()); err != nil {
				return nil, err
			}
		}
	}
	return cfg, at.wrap(cfg.Validate())
}

// parsePin parses one `pin <version> { ... }` of the route block, whose
// section is parent, and returns the pin's own section.
func parsePin(d *caddyfile.Dispenser, cfg *route.Config, parent section) (section, error) {
	version, err := stringArg(d)
	if err != nil {
		return section{}, err
	}
	at := parent.here(d)
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
			err = parseQuestionLine(d, &pin, "pin")
		case "org":
			err = parseOrgLines(d, &pin)
		default:
			return d.Errf("unknown pin subdirective %q", name)
		}
		return err
	}, "question", "org"); err != nil {
		return at, err
	}
	// The pins so far, alone, are a valid route block unless this pin is
	// at fault: validated here, its faults name the pin's line (the whole
	// block is validated again once it is read).
	pins := append(cfg.Pins, pin)
	if err := at.wrap((route.Config{Pins: pins}).Validate()); err != nil {
		return at, err
	}
	cfg.Pins = pins
	return at, nil
}

// parseQuestionLine parses `question <id> <threshold> [cert <id>]` of a
// pin, or of an escalate block (block names which, for errors).
func parseQuestionLine(d *caddyfile.Dispenser, pin *route.Pin, block string) error {
	id, err := stringArg(d)
	if err != nil {
		return err
	}
	t, cert, err := thresholdLine(d)
	if err != nil {
		return err
	}
	if _, dup := pin.Questions[id]; dup {
		return d.Errf("question %q has two thresholds in %s %q", id, block, pin.Version)
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

// parseQueue parses `queue <stream> [maxlen <n>]`.
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
			if q.MaxLen, err = strconv.ParseInt(v, 10, 64); err != nil {
				return d.Errf("maxlen %q is not a whole number", v)
			}
			if err := notZero(d, "maxlen", q.MaxLen == 0); err != nil {
				return err
			}
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
			if err := notZero(d, "floor", v == 0); err != nil {
				return err
			}
			a.Floor = v
		} else {
			a.From = &v
		}
	}
	cfg.ActiveAudit = a
	return nil
}
