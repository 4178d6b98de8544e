package breaker

import (
	"fmt"
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
	// any uint32 above 0. Default 5.
	Failures uint32 `json:"failures,omitempty"`
	// OpenFor is how long an open breaker answers for the upstream before it
	// lets probes through; positive. Default 30s.
	OpenFor caddy.Duration `json:"open_for,omitempty"`
	// HalfOpen is the number of probes let through while half-open, any
	// uint32 above 0. Default 1.
	HalfOpen uint32 `json:"half_open,omitempty"`
}

// Validate checks the block as written: open_for is not negative (0 is the
// default). Every uint32 count is valid, 0 being the default. A Caddyfile
// reports its errors as they are, after the block's name.
func (c Config) Validate() error {
	if c.OpenFor < 0 {
		return fmt.Errorf("open_for %v: want a positive duration", time.Duration(c.OpenFor))
	}
	return nil
}
