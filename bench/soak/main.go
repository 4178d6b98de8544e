// Command soak holds a steady load on the gateway for a chosen time and
// reports, at intervals, the proxy process's goroutines, live heap and RSS:
//
//	go run ./bench/soak -duration 30m -interval 1m   # a long soak
//	go run ./bench/soak -duration 12s -interval 2s -check   # CI's check
//
// It starts the same stack as bench/load (redis-server, the simulated
// upstream, the guardrails stub, one Caddy process with the gateway's
// configurations; not bench/load's second proxy nor nginx) and sends, at a
// fixed rate, every payload through every gateway configuration of that
// process (L, Lb, Lm, La, G, GC, C and E; see bench/load), in turn. Every
// answer is checked as bench/load checks it.
//
// Samples are taken between intervals, with no request in flight, after a
// forced garbage collection, and after a warm-up of one interval at full
// concurrency that opens every connection the proxy will hold. With -check it fails unless, against the first
// sample, the last one holds at most goroutineSlack more goroutines and at
// most heapGrowth more live heap (a leak of one goroutine or a few hundred
// bytes per request shows far beyond either).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/systemone/systemone-gateway/bench/internal/harness"
	"github.com/systemone/systemone-gateway/bench/payload"
)

// Tolerances of -check, against the first sample.
const (
	goroutineSlack = 20      // connections coming and going, timers
	heapGrowth     = 0.25    // of the first sample's live heap ...
	heapSlack      = 4 << 20 // ... plus this many bytes
)

func main() {
	harness.ServeGuardrailsStubIfAsked()
	duration := flag.Duration("duration", 10*time.Minute, "how long to hold the load")
	interval := flag.Duration("interval", 30*time.Second, "time between samples")
	rate := flag.Float64("rate", 200, "requests per second")
	check := flag.Bool("check", false, "fail unless goroutines and live heap stay flat")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, *duration, *interval, *rate, *check); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, duration, interval time.Duration, rate float64, check bool) error {
	if duration <= 0 || interval <= 0 || interval > duration || rate <= 0 {
		return errors.New("-duration, -interval and -rate must be positive, -interval at most -duration")
	}
	// The process the soak samples: the first proxy's configurations only.
	configs := slices.DeleteFunc(harness.AllConfigs(), func(c string) bool { return !harness.InFirstProxy(c) })
	fmt.Fprintf(out, "soak: %v at %.0f requests/s, a sample every %v; every payload through %s in turn\n",
		duration, rate, interval, strings.Join(configs[1:], ", "))
	stack, err := harness.StartStack(ctx, harness.Options{Configs: configs})
	if err != nil {
		return err
	}
	defer stack.Stop()
	driver := harness.NewDriver(64)
	defer driver.Close()

	var reqs []harness.Request
	for _, p := range payload.All() {
		want, err := stack.Reference(ctx, driver, p.Body)
		if err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		for _, c := range configs[1:] {
			r := stack.Requests(c, p.Body, want)
			if c == harness.Everything {
				// One organization per key, as the others: E's many keep
				// its misses apart under bench/load's concurrency, which
				// the soak's steady rate is far from, and would make one
				// pass over every request many times longer.
				r = r[:len(harness.Keys)]
			}
			if c == harness.Cached {
				if err := stack.Prime(ctx, driver, r); err != nil {
					return err
				}
			}
			reqs = append(reqs, r...)
		}
	}
	// Spread the configurations and payloads evenly over time: request i
	// takes the next key of the next (configuration, payload).
	var mixed []harness.Request
	for k := range harness.Keys {
		for i := k; i < len(reqs); i += len(harness.Keys) {
			mixed = append(mixed, reqs[i])
		}
	}

	// A warm-up at the driver's full concurrency first: it opens every
	// connection the proxy will hold (to clients, the upstream, Redis, the
	// guardrails stub), so that the samples compare steady states rather
	// than how many connections one slow moment happened to open.
	if warm := driver.Closed(ctx, mixed, 64, interval); warm.Err != nil {
		return fmt.Errorf("warm-up: %w", warm.Err)
	}

	const row = "%8s %9s %6s %7s %7s %10s %13s %8s\n"
	fmt.Fprintf(out, row, "elapsed", "requests", "req/s", "p50 ms", "p99 ms", "goroutines", "live heap MiB", "RSS MiB")
	intervals := int((duration + interval - 1) / interval)
	if check && intervals < 2 {
		return errors.New("-check needs at least two intervals")
	}
	var first, last harness.Sample
	total := 0
	start := time.Now()
	for n := range intervals {
		res := driver.Open(ctx, mixed, rate, interval, 64)
		if res.Err != nil {
			return fmt.Errorf("after %d requests: %w", total+res.Requests, res.Err)
		}
		total += res.Requests
		if last, err = stack.SampleProxy(ctx); err != nil {
			return err
		}
		if n == 0 {
			first = last
		}
		fmt.Fprintf(out, row, time.Since(start).Round(time.Second), fmt.Sprint(total), fmt.Sprintf("%.0f", res.Throughput()),
			fmt.Sprintf("%.2f", float64(res.Percentile(0.5))/1e6), fmt.Sprintf("%.2f", float64(res.Percentile(0.99))/1e6),
			fmt.Sprint(last.Goroutines), fmt.Sprintf("%.1f", float64(last.HeapLive)/(1<<20)), fmt.Sprintf("%.1f", float64(last.RSS)/(1<<20)))
		if err := stack.Alive(); err != nil {
			return err
		}
	}
	if !check {
		return nil
	}
	if err := flat(first, last); err != nil {
		return err
	}
	fmt.Fprintf(out, "flat: goroutines %d -> %d (tolerance +%d), live heap %.1f -> %.1f MiB (tolerance +%.0f%% + %d MiB)\n",
		first.Goroutines, last.Goroutines, goroutineSlack,
		float64(first.HeapLive)/(1<<20), float64(last.HeapLive)/(1<<20), 100*heapGrowth, heapSlack>>20)
	return nil
}

// flat reports an error when last has grown past the tolerances over first.
func flat(first, last harness.Sample) error {
	var errs []error
	if last.Goroutines > first.Goroutines+goroutineSlack {
		errs = append(errs, fmt.Errorf("goroutines grew from %d to %d (tolerance +%d)", first.Goroutines, last.Goroutines, goroutineSlack))
	}
	if limit := float64(first.HeapLive)*(1+heapGrowth) + heapSlack; float64(last.HeapLive) > limit {
		errs = append(errs, fmt.Errorf("live heap grew from %.1f to %.1f MiB (tolerance %.0f%% + %d MiB)",
			float64(first.HeapLive)/(1<<20), float64(last.HeapLive)/(1<<20), 100*heapGrowth, heapSlack>>20))
	}
	return errors.Join(errs...)
}
