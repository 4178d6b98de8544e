package breaker

import "github.com/caddyserver/caddy/v2"

// Config is the `breaker` block: one circuit breaker per requested model,
// created when a request for the model first fails. Configs with equal
// settings (after defaults) share their breakers, so a reload that leaves
// them unchanged keeps every breaker's state; changing any of them starts
// afresh.
type Config struct {
	// Failures is the number of consecutive failures that opens a breaker.
	// Default 5.
	Failures uint32 `json:"failures,omitempty"`
	// OpenFor is how long an open breaker answers for the upstream before it
	// lets probes through. Default 30s.
	OpenFor caddy.Duration `json:"open_for,omitempty"`
	// HalfOpen is the number of probes let through while half-open. Default 1.
	HalfOpen uint32 `json:"half_open,omitempty"`
}
