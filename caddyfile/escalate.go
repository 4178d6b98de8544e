package caddyfile

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/systemone/systemone-gateway/policy/route"
)

// parseEscalate parses one `escalate <version> to <version> { noul|choice|
// score <t> [cert <id>]; question <id> <t> [cert <id>]; timeout <d> }` of
// the route block, whose section is parent. Its lines are read as a pin's
// (a line given twice is refused here); package route validates the rest
// against the pins, at the escalate line.
func parseEscalate(d *caddyfile.Dispenser, cfg *route.Config, parent section) (section, error) {
	at := parent.here(d)
	from, err := stringArg(d)
	if err != nil {
		return at, err
	}
	if !d.NextArg() || d.Val() != "to" {
		return at, d.Err("escalate takes <version> to <version>")
	}
	to, err := stringArg(d)
	if err != nil {
		return at, err
	}
	if d.NextArg() {
		return at, d.ArgErr()
	}
	e := route.Escalation{From: from, To: route.Pin{Version: to}}
	if err := block(d, func(name string) (err error) {
		switch name {
		case "noul":
			e.To.Noul, e.To.NoulCert, err = thresholdLine(d)
		case "choice":
			e.To.Choice, e.To.ChoiceCert, err = thresholdLine(d)
		case "score":
			e.To.Score, e.To.ScoreCert, err = thresholdLine(d)
		case "question":
			err = parseQuestionLine(d, &e.To, "escalate to")
		case "timeout":
			e.Timeout, err = durationArg(d)
		default:
			return d.Errf("unknown escalate subdirective %q", name)
		}
		return err
	}, "question"); err != nil {
		return at, err
	}
	cfg.Escalations = append(cfg.Escalations, e)
	return at, nil
}

// validateEscalations validates the route block's escalate blocks, once
// the whole block is read (the pin one needs may come after it), each
// with the ones before it, so that a fault names its escalate line (at,
// in the blocks' order).
func validateEscalations(cfg *route.Config, at []section) error {
	for i := range cfg.Escalations {
		partial := route.Config{Pins: cfg.Pins, Escalations: cfg.Escalations[:i+1]}
		if err := at[i].wrap(partial.Validate()); err != nil {
			return err
		}
	}
	return nil
}
