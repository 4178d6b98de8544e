package caddyfile

import (
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/systemone/systemone-gateway/policy/limits"
)

// parseLimits parses the `limits` block; package limits validates it.
func parseLimits(d *caddyfile.Dispenser) (*limits.Config, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	at := sectionAt(d)
	cfg := new(limits.Config)
	if err := block(d, func(name string) (err error) {
		switch name {
		case "requests_per_minute":
			cfg.RequestsPerMinute, err = countArg(d)
		case "tokens_per_second":
			cfg.TokensPerSecond, err = countArg(d)
		case "token_burst":
			cfg.TokenBurst, err = countArg(d)
		case "budget":
			cfg.Budget, err = budgetArg(d)
		case "price":
			cfg.Price, err = yuanArg(d)
		case "budget_timezone":
			cfg.BudgetTimezone, err = wordArg(d)
		case "org":
			err = parseOrg(d, cfg)
		case "on_store_error":
			cfg.OnStoreError, err = wordArg(d)
		case "store_timeout":
			cfg.StoreTimeout, err = durationArg(d)
		case "local_allowance":
			cfg.LocalAllowance, err = allowanceArgs(d)
		default:
			return d.Errf("unknown limits subdirective %q", name)
		}
		return err
	}, "org"); err != nil {
		return nil, err
	}
	return cfg, at.wrap(cfg.Validate())
}

func parseOrg(d *caddyfile.Dispenser, cfg *limits.Config) error {
	id, err := stringArg(d)
	if err != nil {
		return err
	}
	if _, dup := cfg.Orgs[id]; dup {
		return d.Errf("duplicate org %q", id)
	}
	var o limits.Override
	if err := block(d, func(name string) (err error) {
		switch name {
		case "requests_per_minute":
			o.RequestsPerMinute, err = countArg(d)
		case "tokens_per_second":
			o.TokensPerSecond, err = countArg(d)
		case "token_burst":
			o.TokenBurst, err = countArg(d)
		case "budget":
			o.Budget, err = budgetArg(d)
		default:
			return d.Errf("unknown org subdirective %q", name)
		}
		return err
	}); err != nil {
		return err
	}
	if cfg.Orgs == nil {
		cfg.Orgs = map[string]limits.Override{}
	}
	cfg.Orgs[id] = o
	return nil
}

// yuanArg reads one amount in yuan, placeholders resolved (package limits
// checks its bounds).
func yuanArg(d *caddyfile.Dispenser) (*limits.Yuan, error) {
	y, _, err := amount(d)
	if err != nil {
		return nil, err
	}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	return &y, nil
}

// budgetArg reads `<yuan> per day|month`.
func budgetArg(d *caddyfile.Dispenser) (*limits.Budget, error) {
	y, v, err := amount(d)
	if err != nil {
		return nil, err
	}
	if !d.NextArg() || d.Val() != "per" {
		return nil, d.Errf("budget %s: want `budget <yuan> per day|month`", v)
	}
	per, err := wordArg(d)
	if err != nil {
		return nil, err
	}
	return &limits.Budget{Yuan: y, Per: per}, nil
}

// amount reads one amount in yuan, and the text it was written as.
func amount(d *caddyfile.Dispenser) (limits.Yuan, string, error) {
	v, err := resolvedArg(d)
	if err != nil {
		return 0, "", err
	}
	y, err := limits.ParseYuan(v)
	if err != nil {
		return 0, "", d.WrapErr(err)
	}
	return y, v, nil
}

// allowanceArgs reads `local_allowance off` or `local_allowance
// [always|adaptive] [<share>% [<interval>]]`, placeholders resolved;
// package limits checks the ranges and supplies the defaults of what is
// left out.
func allowanceArgs(d *caddyfile.Dispenser) (*limits.LocalAllowance, error) {
	a := new(limits.LocalAllowance)
	if !d.NextArg() {
		return a, nil
	}
	v := caddy.NewReplacer().ReplaceAll(d.Val(), "")
	switch v {
	case limits.AllowanceOff, limits.AllowanceAdaptive, limits.AllowanceAlways:
		// The mode; a share after off is Validate's error.
		a.Mode = v
		if !d.NextArg() {
			return a, nil
		}
		v = caddy.NewReplacer().ReplaceAll(d.Val(), "")
	}
	num, isPercent := strings.CutSuffix(v, "%")
	f, err := strconv.ParseFloat(num, 64)
	if !isPercent || err != nil {
		return nil, d.Errf("local_allowance share %q: want a percentage such as 2%%", v)
	}
	share := f / 100
	a.Share = &share
	if d.CountRemainingArgs() > 0 {
		if a.Interval, err = namedDurationArg(d, "local_allowance interval"); err != nil {
			return nil, err
		}
	}
	return a, nil
}
