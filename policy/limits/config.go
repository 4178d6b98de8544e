package limits

import "github.com/caddyserver/caddy/v2"

// Config is the `limits` block: per-organization token buckets.
type Config struct {
	// Redis lists redis:// or rediss:// URLs. Empty keeps the buckets in
	// process; one URL is a single server; several are the seed nodes of a
	// Redis Cluster.
	Redis []string `json:"redis,omitempty"`
	// KeyPrefix prefixes every Redis key. Default "systemone:".
	KeyPrefix string `json:"key_prefix,omitempty"`
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
