package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/systemone/systemone-gateway/bench/internal/harness"
	"github.com/systemone/systemone-gateway/bench/payload"
)

// profile runs each configuration served by Caddy once more per payload
// while its process's admin endpoint records a CPU profile, then saves an
// allocation profile of the first proxy's whole run.
func (b *bench) profile(ctx context.Context, payloads []payload.Payload) error {
	if err := os.MkdirAll(b.o.profileDir, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(b.out, "\nprofiles in %s:\n", b.o.profileDir)
	secs := max(int(b.o.duration.Seconds()), 1)
	var tables bytes.Buffer
	for _, p := range payloads {
		want, err := b.stack.Reference(ctx, b.driver, p.Body)
		if err != nil {
			return err
		}
		var attributed []profiled
		for _, c := range b.o.configs {
			admin := b.stack.AdminOf(c)
			if admin == "" {
				continue // nginx: no Go profile
			}
			path := filepath.Join(b.o.profileDir, fmt.Sprintf("cpu-%s-%s.pprof", p.Name, c))
			got := make(chan error, 1)
			go func() {
				data, err := harness.Get(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", admin, secs))
				if err == nil {
					err = os.WriteFile(path, data, 0o644)
				}
				got <- err
			}()
			reqs, _, err := b.requests(ctx, c, p.Body, want)
			if err != nil {
				return fmt.Errorf("profiling %s %s: %w", p.Name, c, err)
			}
			res := b.driver.Closed(ctx, reqs, b.o.concurrency, time.Duration(secs)*time.Second+500*time.Millisecond)
			if err := errors.Join(res.Err, <-got); err != nil {
				return fmt.Errorf("profiling %s %s: %w", p.Name, c, err)
			}
			// The profile covers the run's first secs seconds; its
			// requests are about that share of the run's.
			requests := float64(res.Requests) * float64(secs) / (float64(secs) + 0.5)
			fmt.Fprintf(b.out, "  %s (about %.0f requests)\n", path, requests)
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			g, err := attribute(data)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			attributed = append(attributed, profiled{config: c, groups: g, requests: requests})
		}
		attributionTable(&tables, p.Name, attributed)
	}
	_, _ = b.out.Write(tables.Bytes())
	data, err := harness.Get(ctx, b.stack.ProxyAdmin+"/debug/pprof/allocs")
	if err != nil {
		return err
	}
	path := filepath.Join(b.o.profileDir, "allocs.pprof")
	fmt.Fprintf(b.out, "  %s (allocations of the whole run)\n", path)
	return os.WriteFile(path, data, 0o644)
}
