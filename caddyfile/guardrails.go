package caddyfile

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/systemone/systemone-gateway/policy/guardrails"
)

// parseGuardrails parses the `guardrails <url>` block; package guardrails
// validates it (a missing URL included).
func parseGuardrails(d *caddyfile.Dispenser) (*guardrails.Config, error) {
	at := sectionAt(d)
	cfg := new(guardrails.Config)
	if d.NextArg() {
		cfg.URL = d.Val()
	}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	if err := block(d, func(name string) (err error) {
		switch name {
		case "api_key":
			cfg.APIKey, err = stringArg(d)
		case "model":
			cfg.Model, err = stringArg(d)
		case "timeout":
			cfg.Timeout, err = durationArg(d)
		case "block":
			cfg.Block, err = wordsArg(d)
		case "review":
			cfg.Review, err = wordsArg(d)
		case "block_category":
			cfg.BlockCategory, err = wordsArg(d)
		case "on_error":
			cfg.OnError, err = wordArg(d)
		case "cache":
			cfg.Cache, err = durationArg(d)
		case "mode":
			cfg.Mode, err = wordArg(d)
		default:
			return d.Errf("unknown guardrails subdirective %q", name)
		}
		return err
	}); err != nil {
		return nil, err
	}
	return cfg, at.wrap(cfg.Validate())
}
