package guardrails

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// Config is the `guardrails` block: a check of every evaluation request's
// state against the guardrails service before it is forwarded.
type Config struct {
	// URL is the base URL of the guardrails service; the check is POSTed to
	// URL + "/v1/guardrails". Required.
	URL string `json:"url"`
	// APIKey is the gateway's own key for the guardrails service (never the
	// client's). Required.
	APIKey string `json:"api_key,omitempty"`
	// Model is sent as the request's `model`. Default "Service-Guardrails-Text".
	Model string `json:"model,omitempty"`
	// Timeout bounds the whole check (connect, send, answer). Default 2s.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// Block lists the overall risk levels (none low medium high) that are
	// answered with 400 guardrails_blocked. Default [high].
	Block []string `json:"block,omitempty"`
	// Review lists the levels that are forwarded but routed to a human.
	// Default [medium low].
	Review []string `json:"review,omitempty"`
	// BlockCategory lists category names (those X-Guardrails-Categories
	// reports) that block at any level. Default none.
	BlockCategory []string `json:"block_category,omitempty"`
	// OnError is "block" (default: 503 guardrails_unavailable) or "allow"
	// (forward, unchecked, routed to a human) when the check fails.
	OnError string `json:"on_error,omitempty"`
	// Cache keeps verdicts for identical message lists this long: in Redis
	// when the systemone block has `redis` (shared by every instance), else
	// in process. Default 0 (off). Failed checks are never cached.
	Cache caddy.Duration `json:"cache,omitempty"`
	// Mode is "sequential" (default: check, then forward) or "parallel"
	// (check and forward at once; a block discards the upstream's answer).
	Mode string `json:"mode,omitempty"`
}

// Defaults of the guardrails block.
const (
	DefaultModel   = "Service-Guardrails-Text"
	DefaultTimeout = 2 * time.Second
)

// Values of Config.OnError and Config.Mode.
const (
	OnErrorBlock   = "block"
	OnErrorAllow   = "allow"
	ModeSequential = "sequential"
	ModeParallel   = "parallel"
)

// onErrorValues and modes list the values of Config.OnError and Config.Mode,
// the default first.
var (
	onErrorValues = []string{OnErrorBlock, OnErrorAllow}
	modes         = []string{ModeSequential, ModeParallel}
)

// Validate checks the block as written, before placeholders are resolved:
// the required url and api_key are present, levels and categories are ones
// the gateway knows, the block and review lists do not overlap, and every
// enumerated or timed option is in range, and the URL's form unless it
// holds placeholders (New checks it once they are resolved). A Caddyfile
// reports its errors as they are, after the block's name.
func (c Config) Validate() error {
	_, err := c.resolve(nil)
	return err
}

// withDefaults resolves placeholders in the string options (url, api_key,
// model: a secret given as {env.NAME} stays out of the JSON config) and
// returns c with every unset field at its default, or the first setting that
// is out of range.
func (c Config) withDefaults() (Config, error) {
	return c.resolve(caddy.NewReplacer())
}

// resolve is Validate and withDefaults in one: with a replacer it also
// resolves placeholders and checks the URL's form.
func (c Config) resolve(repl *caddy.Replacer) (Config, error) {
	if c.URL == "" {
		return c, errors.New("url is required")
	}
	if c.APIKey == "" {
		return c, errors.New("api_key is required")
	}
	if repl == nil && !strings.Contains(c.URL, "{") {
		if err := checkURL(c.URL); err != nil {
			return c, err
		}
	}
	if repl != nil {
		c.URL, c.APIKey, c.Model = repl.ReplaceAll(c.URL, ""), repl.ReplaceAll(c.APIKey, ""), repl.ReplaceAll(c.Model, "")
		if err := checkURL(c.URL); err != nil {
			return c, err
		}
		if c.APIKey == "" {
			return c, errors.New("api_key is empty once its placeholders are resolved")
		}
	}
	if c.Model == "" {
		c.Model = DefaultModel
	}
	switch {
	case c.Timeout < 0:
		return c, fmt.Errorf("timeout %v: must be positive", time.Duration(c.Timeout))
	case c.Timeout == 0:
		c.Timeout = caddy.Duration(DefaultTimeout)
	}
	if c.Cache < 0 {
		return c, fmt.Errorf("cache %v: must not be negative", time.Duration(c.Cache))
	}
	for _, list := range []struct {
		option string
		levels []string
	}{{"block", c.Block}, {"review", c.Review}} {
		for _, l := range list.levels {
			if !slices.Contains(riskLevels, l) {
				return c, fmt.Errorf("%s %q: must be one of %s", list.option, l, strings.Join(riskLevels, " "))
			}
		}
	}
	// A list left to its default gives way to the levels the other list
	// names: `block medium high` alone must not clash with the default
	// review of medium. Only two explicit lists can overlap.
	switch {
	case c.Block == nil && c.Review == nil:
		c.Block, c.Review = []string{RiskHigh}, []string{RiskMedium, RiskLow}
	case c.Block == nil:
		c.Block = without([]string{RiskHigh}, c.Review)
	case c.Review == nil:
		c.Review = without([]string{RiskMedium, RiskLow}, c.Block)
	}
	for _, l := range c.Block {
		if slices.Contains(c.Review, l) {
			return c, fmt.Errorf("risk level %q is in both block and review", l)
		}
	}
	for _, name := range c.BlockCategory {
		if !slices.Contains(categoryNames, name) {
			return c, fmt.Errorf("block_category %q: must be one of %s", name, strings.Join(categoryNames, " "))
		}
	}
	switch {
	case c.OnError == "":
		c.OnError = OnErrorBlock
	case !slices.Contains(onErrorValues, c.OnError):
		return c, fmt.Errorf("on_error %q: must be %s or %s", c.OnError, OnErrorBlock, OnErrorAllow)
	}
	switch {
	case c.Mode == "":
		c.Mode = ModeSequential
	case !slices.Contains(modes, c.Mode):
		return c, fmt.Errorf("mode %q: must be %s or %s", c.Mode, ModeSequential, ModeParallel)
	}
	return c, nil
}

// checkURL accepts an http(s) base URL with a host and nothing else.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("url: %v", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("url %q: must be http:// or https:// with a host", raw)
	}
	// The key belongs in api_key, and the check's path is appended to the
	// URL: credentials, a query or a fragment here would be a mistake that
	// might also end up in error messages.
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("url: must not hold credentials, a query or a fragment")
	}
	return nil
}

// without returns the levels of defaults that are not in explicit.
func without(defaults, explicit []string) []string {
	return slices.DeleteFunc(defaults, func(l string) bool { return slices.Contains(explicit, l) })
}
