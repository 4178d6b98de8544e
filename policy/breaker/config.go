package breaker

import (
	"fmt"
	"math"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// Config is the `breaker` block: one circuit breaker per requested model,
// created when a request for the model first fails. Configs with equal
// settings (after defaults) share their breakers, so a reload that leaves
// them unchanged keeps every breaker's state; changing any of them starts
// afresh.
type Config struct {
	// Failures is the number of consecutive failures that opens a breaker,
	// from 1 to MaxCount. Default 5.
	Failures uint32 `json:"failures,omitempty"`
	// OpenFor is how long an open breaker answers for the upstream before it
	// lets probes through; positive. Default 30s.
	OpenFor caddy.Duration `json:"open_for,omitempty"`
	// HalfOpen is the number of probes let through while half-open, from 1
	// to MaxCount. Default 1.
	HalfOpen uint32 `json:"half_open,omitempty"`
}

// MaxCount is the largest failures or half_open: 4294967295.
const MaxCount = math.MaxUint32

// Count checks a failures or half_open value as written in a Caddyfile
// (where 0 cannot mean "the default", as it does in JSON): a whole number
// from 1 to MaxCount. option names it in the message.
func Count(option string, n int64) (uint32, error) {
	if n < 1 || n > MaxCount {
		return 0, fmt.Errorf("%s %d: want a whole number from 1 to %d", option, n, uint32(MaxCount))
	}
	return uint32(n), nil
}

// Validate checks the block as written: open_for is not negative (0 is the
// default). Every uint32 count is valid, 0 being the default. Its error
// texts are the ones the Caddyfile reports, after the block's name.
func (c Config) Validate() error {
	if c.OpenFor < 0 {
		return fmt.Errorf("open_for %v: want a positive duration", time.Duration(c.OpenFor))
	}
	return nil
}
