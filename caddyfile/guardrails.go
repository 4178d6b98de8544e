package caddyfile

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/systemone/systemone-gateway/policy/guardrails"
)

// parseGuardrails parses the `guardrails <url>` block; package guardrails
// validates it.
func parseGuardrails(d *caddyfile.Dispenser) (*guardrails.Config, error) {
	at := blockErr(d)
	cfg := new(guardrails.Config)
	if !d.NextArg() {
		return nil, d.Err("guardrails needs the service's base URL")
	}
	cfg.URL = d.Val()
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
			cfg.Block, err = listOf(d, guardrails.Levels)
		case "review":
			cfg.Review, err = listOf(d, guardrails.Levels)
		case "block_category":
			cfg.BlockCategory, err = listOf(d, guardrails.Categories)
		case "on_error":
			cfg.OnError, err = oneOf(d, guardrails.OnErrorValues)
		case "cache":
			cfg.Cache, err = durationArg(d)
		case "mode":
			cfg.Mode, err = oneOf(d, guardrails.Modes)
		default:
			return d.Errf("unknown guardrails subdirective %q", name)
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
