package cache

import (
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// Config is the `cache` block: the exact answer cache. Its numbers are
// resolved when the Caddyfile is adapted (placeholders such as {env.NAME}
// included), so the JSON holds plain numbers.
type Config struct {
	// TTL is how long an entry is answered from after it was stored.
	// Default 10m.
	TTL caddy.Duration `json:"ttl,omitempty"`
	// MaxEntries bounds the in-process cache: past it, the least recently
	// used entry goes. It has no effect with `redis`, where Redis's own
	// maxmemory policy bounds the entries. Default 10000.
	MaxEntries int `json:"max_entries,omitempty"`
	// MaxSize is the largest answer body stored, in bytes, as the upstream
	// sent it (compressed when it was); a larger answer is forwarded every
	// time. Default 1 MiB, at most 8 MiB (the most of an answer the gateway
	// reads).
	MaxSize int64 `json:"max_size,omitempty"`
}

// Defaults and bounds of the cache block.
const (
	DefaultTTL        = 10 * time.Minute
	DefaultMaxEntries = 10_000
	DefaultMaxSize    = 1 << 20
	// maxMaxSize is the largest max_size: the gateway reads at most 8 MiB
	// of an answer; a larger one streams through unread.
	maxMaxSize = 8 << 20
	// maxMaxEntries bounds max_entries, and so the memory the in-process
	// cache's index may take.
	maxMaxEntries = 10_000_000
)

// Validate checks the block's ranges (0 being each option's default). A
// Caddyfile reports its errors as they are, after the block's name.
func (c Config) Validate() error {
	switch {
	case c.TTL < 0:
		return fmt.Errorf("ttl %v: must be a positive duration", time.Duration(c.TTL))
	case c.MaxEntries < 0 || c.MaxEntries > maxMaxEntries:
		return fmt.Errorf("max_entries %d: must be from 1 to %d", c.MaxEntries, maxMaxEntries)
	case c.MaxSize < 0 || c.MaxSize > maxMaxSize:
		return fmt.Errorf("max_size %d: must be from 1 byte to 8MiB (%d bytes)", c.MaxSize, maxMaxSize)
	}
	return nil
}

// withDefaults is c with every unset option at its default.
func (c Config) withDefaults() Config {
	if c.TTL == 0 {
		c.TTL = caddy.Duration(DefaultTTL)
	}
	if c.MaxEntries == 0 {
		c.MaxEntries = DefaultMaxEntries
	}
	if c.MaxSize == 0 {
		c.MaxSize = DefaultMaxSize
	}
	return c
}
