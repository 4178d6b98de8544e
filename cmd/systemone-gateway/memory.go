package main

import (
	"os"
	"runtime/debug"
	"strconv"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// The garbage collector's settings the binary runs with unless the
// environment sets them (docs/operations.md, "Memory and the garbage
// collector").
const (
	// defaultGCPercent is GOGC 400: the heap may grow to five times what
	// is live before the next collection, where Go's default (100) lets
	// it grow to twice. A gateway's live heap is small (a few MiB of
	// config, pools and caches) and its garbage is per request, so
	// collecting a quarter as often costs a few MiB and saves most of
	// the collector's CPU.
	defaultGCPercent = 400
	// memoryLimitShare is the soft memory limit, as a share of the
	// container's memory limit (cgroup), or of the machine's memory
	// without one: Caddy's own default share. The collector runs as
	// often as it must to stay below it, whatever GOGC allows.
	memoryLimitShare = 0.9
)

// Environment variables that set the collector; when one is set, the
// binary leaves that setting to it.
const (
	envGOGC       = "GOGC"
	envGOMEMLIMIT = "GOMEMLIMIT"
	// envAUTOMEMLIMIT is Caddy's (automemlimit's) share of the memory
	// limit, or "off": when set, Caddy's rule decides the limit.
	envAUTOMEMLIMIT = "AUTOMEMLIMIT"
)

// memoryDefaults are the collector's settings the binary applied, for a
// test to read; a zero field was left to the environment.
type memoryDefaults struct {
	gcPercent   int
	memoryLimit int64
}

// applyMemoryDefaults sets GOGC 400 and a soft memory limit of 90% of the
// container's (or machine's) memory, each unless the environment (lookup)
// sets it. It writes what it set into the environment (setenv) too, so
// that Caddy's `run`, which sets a memory limit of its own unless
// GOMEMLIMIT is set, keeps this one, and so that a process the binary
// starts (`start` runs `run`) gets the same settings. available is the
// memory the limit is a share of; when it cannot be read, no limit is set.
func applyMemoryDefaults(lookup func(string) (string, bool), setenv func(key, value string) error, available func() (uint64, error)) memoryDefaults {
	var applied memoryDefaults
	if _, set := lookup(envGOGC); !set {
		debug.SetGCPercent(defaultGCPercent)
		_ = setenv(envGOGC, strconv.Itoa(defaultGCPercent))
		applied.gcPercent = defaultGCPercent
	}
	_, limitSet := lookup(envGOMEMLIMIT)
	_, autoSet := lookup(envAUTOMEMLIMIT)
	if !limitSet && !autoSet {
		if total, err := available(); err == nil && total > 0 {
			limit := int64(float64(total) * memoryLimitShare)
			debug.SetMemoryLimit(limit)
			_ = setenv(envGOMEMLIMIT, strconv.FormatInt(limit, 10))
			applied.memoryLimit = limit
		}
	}
	return applied
}

// availableMemory is the container's memory limit (cgroup v1 or v2), or
// the machine's memory without one.
func availableMemory() (uint64, error) {
	return memlimit.ApplyFallback(memlimit.FromCgroup, memlimit.FromSystem)()
}

// setMemoryDefaults applies the defaults to this process.
func setMemoryDefaults() { applyMemoryDefaults(os.LookupEnv, os.Setenv, availableMemory) }
