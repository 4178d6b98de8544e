package limits

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/systemone/systemone-gateway/policy/limits/store"
)

// Config is the `limits` block: per-organization token buckets and spend
// budgets.
type Config struct {
	// RequestsPerMinute is the requests bucket's capacity, refilled at n/60
	// per second. Default 300; 0 turns the bucket off.
	RequestsPerMinute *int64 `json:"requests_per_minute,omitempty"`
	// TokensPerSecond refills the input-token bucket. Default 1000; 0 turns
	// the bucket off.
	TokensPerSecond *int64 `json:"tokens_per_second,omitempty"`
	// TokenBurst is the input-token bucket's capacity. Default 64000.
	TokenBurst *int64 `json:"token_burst,omitempty"`
	// Budget caps what each organization may spend per calendar day or
	// month (see Budget). Default none.
	Budget *Budget `json:"budget,omitempty"`
	// Price is what a million input tokens cost, in yuan, at most 6
	// decimals, more than 0 and at most 1,000: what budgets are charged.
	// Default 0.042, the upstream's price.
	Price *Yuan `json:"price,omitempty"`
	// BudgetTimezone is the IANA time zone whose midnights begin budget
	// days and months (DST included). Default UTC.
	BudgetTimezone string `json:"budget_timezone,omitempty"`
	// Orgs overrides any of the three numbers and the budget for one
	// organization id.
	Orgs map[string]Override `json:"orgs,omitempty"`
	// OnStoreError decides what happens when Redis fails: "local" (default)
	// falls back to in-process buckets with the same limits, "allow" admits,
	// "deny" answers 503 rate_limiter_unavailable.
	OnStoreError string `json:"on_store_error,omitempty"`
	// StoreTimeout bounds one admission against Redis. Default 50ms.
	StoreTimeout caddy.Duration `json:"store_timeout,omitempty"`
	// LocalAllowance, with Redis, lets each instance admit an
	// organization's requests from a slice of its buckets taken from Redis
	// beforehand, without a round trip per request (see LocalAllowance).
	// Default (unset): the adaptive mode with a 2% share and a 100ms
	// interval, which leases only organizations admitted fast against
	// limits large enough; every other admission is one exact Redis round
	// trip. Mode "off" makes every admission exact. Organizations with a
	// budget always get exact admission.
	LocalAllowance *LocalAllowance `json:"local_allowance,omitempty"`
}

// LocalAllowance is the `local_allowance` option: an instance takes a
// lease, Share of each bucket's capacity, from Redis and admits from it
// locally until it is spent or Interval has passed; the unspent rest goes
// back to Redis. Across N instances the buckets may admit up to
// (N-1)*slice + min(slice, rate*Interval) units more than exact admission
// over any window (see docs/limits.md, "Local allowance").
type LocalAllowance struct {
	// Mode is "always" (the default for a local_allowance that is set:
	// every organization without a budget is leased, a requests slice
	// being at least one request), "adaptive" (the default when
	// local_allowance is unset: an organization is leased only while this
	// instance admits at least 8 of its requests per interval and a slice
	// pays at least 8 of them; see docs/limits.md, "Adaptive allowance")
	// or "off" (every admission exact, one round trip; no share or
	// interval then).
	Mode string `json:"mode,omitempty"`
	// Share is the part of each bucket's capacity one lease takes, as a
	// fraction: more than 0, at most 0.5. Default 0.02 (2%). A requests
	// slice is at least one request.
	Share *float64 `json:"share,omitempty"`
	// Interval is how long a lease may be spent from, 1ms to 10s. Default
	// 100ms. It also bounds how late another instance
	// honours an upstream hold (Hold).
	Interval caddy.Duration `json:"interval,omitempty"`
}

// Override replaces some of the defaults for one organization; it sets at
// least one of them.
type Override struct {
	RequestsPerMinute *int64 `json:"requests_per_minute,omitempty"`
	TokensPerSecond   *int64 `json:"tokens_per_second,omitempty"`
	TokenBurst        *int64 `json:"token_burst,omitempty"`
	// Budget replaces the default budget; a budget of 0 exempts the
	// organization.
	Budget *Budget `json:"budget,omitempty"`
}

// Defaults of the limits block.
const (
	DefaultRequestsPerMinute int64 = 300
	DefaultTokensPerSecond   int64 = 1000
	DefaultTokenBurst        int64 = 64000
	DefaultStoreTimeout            = 50 * time.Millisecond
	// DefaultAllowanceShare and DefaultAllowanceInterval are the
	// local_allowance defaults.
	DefaultAllowanceShare    = 0.02
	DefaultAllowanceInterval = 100 * time.Millisecond
	// AllowanceAlways, AllowanceAdaptive and AllowanceOff are the values
	// of LocalAllowance.Mode.
	AllowanceAlways   = "always"
	AllowanceAdaptive = "adaptive"
	AllowanceOff      = "off"
	// maxAllowanceShare keeps a lease to half a bucket: two instances can
	// always lease at once.
	maxAllowanceShare    = 0.5
	minAllowanceInterval = time.Millisecond
	maxAllowanceInterval = 10 * time.Second
)

// Values of OnStoreError.
const (
	StoreErrorLocal = "local"
	StoreErrorAllow = "allow"
	StoreErrorDeny  = "deny"
)

// storeErrorModes are the values of OnStoreError, the default first.
var storeErrorModes = []string{StoreErrorLocal, StoreErrorAllow, StoreErrorDeny}

// maxLimit bounds every number so that bucket arithmetic stays exact in the
// Redis script's doubles (see store.Unit). Ten million requests per minute or
// tokens per second is far beyond any real organization.
const maxLimit = 10_000_000

// Validate checks the block without acquiring anything: the on_store_error
// value, the numbers (not negative, at most 10,000,000, a positive
// token_burst wherever tokens_per_second is on), the budgets (0 to
// 1,000,000 yuan, at most 6 decimals, per day or month), the price and the
// time zone, each org override setting something, and local_allowance (a
// mode of always, adaptive or off; a share above 0% and at most 50% and an
// interval of 1ms to 10s, neither with off). A Caddyfile reports its
// errors as they are, after the block's name.
func (c Config) Validate() error {
	if c.OnStoreError != "" && !slices.Contains(storeErrorModes, c.OnStoreError) {
		return fmt.Errorf("on_store_error %q: want local, allow or deny", c.OnStoreError)
	}
	if c.StoreTimeout < 0 {
		return fmt.Errorf("store_timeout %s: must not be negative", time.Duration(c.StoreTimeout))
	}
	if a := c.LocalAllowance; a != nil {
		if err := a.validate(); err != nil {
			return err
		}
	}
	if c.Price != nil {
		if err := checkPrice(*c.Price); err != nil {
			return err
		}
	}
	if _, err := loadZone(c.BudgetTimezone); err != nil {
		return err
	}
	base, err := c.defaults().apply(defaultLimits)
	if err != nil {
		return err
	}
	for org, o := range c.Orgs {
		if o == (Override{}) {
			return fmt.Errorf("org %q overrides nothing", org)
		}
		if _, err := o.apply(base); err != nil {
			return fmt.Errorf("org %q: %v", org, err)
		}
	}
	return nil
}

// defaults is the block's own numbers, as an override of the defaults.
func (c Config) defaults() Override {
	return Override{c.RequestsPerMinute, c.TokensPerSecond, c.TokenBurst, c.Budget}
}

// orgLimits are the effective numbers for one organization.
type orgLimits struct {
	rpm, tps, burst int64
	budget          Yuan   // 0: none
	per             string // with a budget: PerDay or PerMonth
}

var defaultLimits = orgLimits{rpm: DefaultRequestsPerMinute, tps: DefaultTokensPerSecond, burst: DefaultTokenBurst}

func (l orgLimits) requests() store.Spec { return store.RequestsPerMinute(l.rpm) }
func (l orgLimits) tokens() store.Spec   { return store.TokensPerSecond(l.tps, l.burst) }

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
	if b := o.Budget; b != nil {
		if err := b.validate(); err != nil {
			return l, err
		}
		l.budget, l.per = b.Yuan, b.Per
	}
	if l.tps > 0 && l.burst == 0 {
		return l, errors.New("token_burst 0 holds no token; turn the token bucket off with tokens_per_second 0")
	}
	return l, nil
}

// validate checks the mode, the share and the interval; unset ones take
// defaults.
func (a LocalAllowance) validate() error {
	switch a.Mode {
	case "", AllowanceAlways, AllowanceAdaptive:
	case AllowanceOff:
		if a.Share != nil || a.Interval != 0 {
			return errors.New("local_allowance off takes no share or interval")
		}
		return nil
	default:
		return fmt.Errorf("local_allowance mode %q: want always, adaptive or off", a.Mode)
	}
	if s := a.Share; s != nil && !(*s > 0 && *s <= maxAllowanceShare) {
		return fmt.Errorf("local_allowance share %s: want more than 0%% and at most 50%%", percent(*s))
	}
	// Unset (0) takes the default; below a millisecond a lease would
	// expire as it is taken (leases count whole microseconds) and every
	// admission would exchange one.
	if a.Interval != 0 && (time.Duration(a.Interval) < minAllowanceInterval || time.Duration(a.Interval) > maxAllowanceInterval) {
		return fmt.Errorf("local_allowance interval %s: want 1ms to 10s", time.Duration(a.Interval))
	}
	return nil
}

// allowance is the local_allowance in effect: the adaptive mode with its
// defaults when none is set.
func (c Config) allowance() LocalAllowance {
	if c.LocalAllowance == nil {
		return LocalAllowance{Mode: AllowanceAdaptive}
	}
	a := *c.LocalAllowance
	if a.Mode == "" {
		a.Mode = AllowanceAlways
	}
	return a
}

// settings returns the share and interval with defaults applied.
func (a LocalAllowance) settings() (share float64, interval time.Duration) {
	share, interval = DefaultAllowanceShare, DefaultAllowanceInterval
	if a.Share != nil {
		share = *a.Share
	}
	if a.Interval != 0 {
		interval = time.Duration(a.Interval)
	}
	return share, interval
}

// percent writes a share as the Caddyfile does, rounding away the binary
// fraction's noise (0.6 is 60%, not 60.00000000000001%).
func percent(f float64) string { return strconv.FormatFloat(f*100, 'g', 10, 64) + "%" }
