package limits

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// Config is the `limits` block: per-organization token buckets.
type Config struct {
	// Redis is refused: the gateway's one Redis client is configured on the
	// systemone block (`redis`, `key_prefix`). Kept only so that an old
	// config gets an error naming the new place instead of being ignored.
	Redis []string `json:"redis,omitempty"`
	// RequestsPerMinute is the requests bucket's capacity, refilled at n/60
	// per second. Default 300; 0 turns the bucket off.
	RequestsPerMinute *int64 `json:"requests_per_minute,omitempty"`
	// TokensPerSecond refills the input-token bucket. Default 1000; 0 turns
	// the bucket off.
	TokensPerSecond *int64 `json:"tokens_per_second,omitempty"`
	// TokenBurst is the input-token bucket's capacity. Default 64000.
	TokenBurst *int64 `json:"token_burst,omitempty"`
	// Orgs overrides any of the three numbers for one organization id.
	Orgs map[string]Override `json:"orgs,omitempty"`
	// OnStoreError decides what happens when Redis fails: "local" (default)
	// falls back to in-process buckets with the same limits, "allow" admits,
	// "deny" answers 503 rate_limiter_unavailable.
	OnStoreError string `json:"on_store_error,omitempty"`
	// StoreTimeout bounds one admission against Redis. Default 50ms.
	StoreTimeout caddy.Duration `json:"store_timeout,omitempty"`
}

// Override replaces some of the defaults for one organization.
type Override struct {
	RequestsPerMinute *int64 `json:"requests_per_minute,omitempty"`
	TokensPerSecond   *int64 `json:"tokens_per_second,omitempty"`
	TokenBurst        *int64 `json:"token_burst,omitempty"`
}

// Defaults of the limits block.
const (
	DefaultRequestsPerMinute int64 = 300
	DefaultTokensPerSecond   int64 = 1000
	DefaultTokenBurst        int64 = 64000
	DefaultStoreTimeout            = 50 * time.Millisecond
)

// Values of OnStoreError.
const (
	StoreErrorLocal = "local"
	StoreErrorAllow = "allow"
	StoreErrorDeny  = "deny"
)

// StoreErrorModes are the values of OnStoreError, the default first.
var StoreErrorModes = []string{StoreErrorLocal, StoreErrorAllow, StoreErrorDeny}

// maxLimit bounds every number so that bucket arithmetic stays exact in the
// Redis script's doubles (see unit). Ten million requests per minute or
// tokens per second is far beyond any real organization.
const maxLimit = 10_000_000

// Validate checks the block without acquiring anything: the on_store_error
// value and the numbers (not negative, at most 10,000,000, a positive
// token_burst wherever tokens_per_second is on). Their error texts are the
// ones the Caddyfile reports.
func (c Config) Validate() error {
	if len(c.Redis) > 0 {
		return errors.New("redis moved from the limits block to the systemone block: write `redis <url>` (and `key_prefix`) directly under systemone")
	}
	if c.OnStoreError != "" && !slices.Contains(StoreErrorModes, c.OnStoreError) {
		return fmt.Errorf("on_store_error %q: want local, allow or deny", c.OnStoreError)
	}
	if c.StoreTimeout < 0 {
		return fmt.Errorf("store_timeout %s: must not be negative", time.Duration(c.StoreTimeout))
	}
	base, err := Override{c.RequestsPerMinute, c.TokensPerSecond, c.TokenBurst}.apply(defaultLimits)
	if err != nil {
		return err
	}
	for org, o := range c.Orgs {
		if _, err := o.apply(base); err != nil {
			return fmt.Errorf("org %q: %v", org, err)
		}
	}
	return nil
}

// orgLimits are the effective numbers for one organization.
type orgLimits struct {
	rpm, tps, burst int64
}

var defaultLimits = orgLimits{DefaultRequestsPerMinute, DefaultTokensPerSecond, DefaultTokenBurst}

// apply returns base with o's numbers in place of base's.
func (o Override) apply(base orgLimits) (orgLimits, error) {
	l := base
	for _, f := range []struct {
		name string
		v    *int64
		dst  *int64
	}{
		{"requests_per_minute", o.RequestsPerMinute, &l.rpm},
		{"tokens_per_second", o.TokensPerSecond, &l.tps},
		{"token_burst", o.TokenBurst, &l.burst},
	} {
		if f.v == nil {
			continue
		}
		if *f.v < 0 || *f.v > maxLimit {
			return l, fmt.Errorf("%s %d: want 0 to %d", f.name, *f.v, maxLimit)
		}
		*f.dst = *f.v
	}
	if l.tps > 0 && l.burst == 0 {
		return l, errors.New("token_burst 0 holds no token; turn the token bucket off with tokens_per_second 0")
	}
	return l, nil
}
