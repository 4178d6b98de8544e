package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/systemone/systemone-gateway/bench/internal/harness"
	"github.com/systemone/systemone-gateway/bench/payload"
)

// What each gateway configuration asks of Redis per request: the MONITOR
// count of sequential requests, and the answer cache's lookups in E's
// measured runs.

// countRoundTrips sends sequential requests through each gateway
// configuration of the first proxy while watching Redis with MONITOR, and
// reports which commands each request cost: the answer cache's lookup (a
// pipeline of lookupGets GETs: the entry, the key's record and the marker
// of another instance's call in flight), the admission
// script (two keys) and the verdict cache's lookup run before forwarding,
// in the handler's order; the settlement (one key), cache stores and
// review entries run after the answer, off the client's path.
//
// Everything must show the answer cache's lookupGets GETs for every
// request: its requests can never be stored, and a lookup skipped would
// flatter it.
// lookupGets is the GETs of one answer cache lookup with Redis: the entry,
// the record that the upstream accepted the key, and the marker another
// instance leaves while its identical request is at the upstream.
const lookupGets = 3

func (b *bench) countRoundTrips(ctx context.Context, p payload.Payload) error {
	const n = 50
	fmt.Fprintf(&b.roundTrips, "\n## Redis commands per request (MONITOR, %d sequential requests of %s)\n\n", n, p.Name)
	want, err := b.stack.Reference(ctx, b.driver, p.Body)
	if err != nil {
		return err
	}
	tw := newTable(&b.roundTrips, "config", "before forwarding", "after the answer", "admission scripts", "answer cache GET", "verdict cache GET", "settle scripts", "other")
	for _, c := range b.o.configs {
		if !harness.IsGateway(c) || !harness.InFirstProxy(c) {
			continue
		}
		reqs, _, err := b.requests(ctx, c, p.Body, want)
		if err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
		counts, err := b.monitor(ctx, reqs, n)
		if err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
		per := func(k string) float64 { return float64(counts[k]) / n }
		if c == harness.Everything && per("answer-get") < lookupGets {
			if err := b.restExplains(per("answer-get")); err != nil {
				return fmt.Errorf("%s: %w", c, err)
			}
		}
		var other []string
		for k, v := range counts {
			if !slices.Contains([]string{"admit", "answer-get", "verdict-get", "settle", "cache-set", "hold"}, k) {
				other = append(other, fmt.Sprintf("%s %.2f", k, float64(v)/n))
			}
		}
		slices.Sort(other)
		tw.row(c,
			fmt.Sprintf("%.2f", per("admit")+per("answer-get")+per("verdict-get")),
			fmt.Sprintf("%.2f", per("settle")+per("cache-set")+per("hold")),
			fmt.Sprintf("%.2f", per("admit")), fmt.Sprintf("%.2f", per("answer-get")), fmt.Sprintf("%.2f", per("verdict-get")), fmt.Sprintf("%.2f", per("settle")),
			strings.Join(append(other, ""), " "))
	}
	tw.flush()
	for _, note := range b.restNotes {
		fmt.Fprintf(&b.roundTrips, "\n%s\n", note)
	}
	return nil
}

// restExplains accounts for Everything's requests that sent the answer
// cache fewer than lookupGets GETs each: only the
// cache's documented health rule may skip a lookup, resting Redis after
// lookups over its timeout (a loaded machine), and it logs that it did. It
// returns an error when the proxy's log says nothing of a rest, else notes
// the skipped lookups under the table.
func (b *bench) restExplains(getsPerRequest float64) error {
	// The log goes through a buffer flushed every second.
	time.Sleep(1500 * time.Millisecond)
	log, err := os.ReadFile(filepath.Join(b.stack.Dir, "proxy.caddy.log"))
	if err != nil {
		return err
	}
	if !bytes.Contains(log, []byte("answer cache: redis failing")) {
		return fmt.Errorf("the answer cache sent %.2f GETs per request, want %d (the entry, the key's record and the marker): not every request looked it up", getsPerRequest, lookupGets)
	}
	b.restNotes = append(b.restNotes, fmt.Sprintf("%s: %.2f answer cache GETs per request, not %d: the cache rested Redis after lookups over its 100 ms timeout (the machine is loaded), and the requests meanwhile skipped the lookup as docs/cache.md says", harness.Everything, getsPerRequest, lookupGets))
	return nil
}

// monitor sends n of reqs in turn, one at a time, and counts by classify
// the commands Redis ran meanwhile.
func (b *bench) monitor(ctx context.Context, reqs []harness.Request, n int) (map[string]int, error) {
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmds, err := b.stack.Redis.Monitor(mctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		cancel()
		for range cmds { // let the reader end
		}
	}()
	var buf bytes.Buffer
	for i := range n {
		if err := b.driver.Do(ctx, reqs[i%len(reqs)], &buf); err != nil {
			return nil, err
		}
	}
	// Settlements without a budget and review entries are queued and sent
	// in the background: give them a moment, then end the count at a
	// marker this program sends.
	time.Sleep(200 * time.Millisecond)
	const marker = "bench-count-end"
	if err := b.stack.Redis.Client.Echo(ctx, marker).Err(); err != nil {
		return nil, err
	}
	counts := make(map[string]int)
	for args := range cmds {
		if len(args) >= 2 && strings.EqualFold(args[0], "echo") && args[1] == marker {
			break
		}
		counts[classify(args)]++
	}
	return counts, nil
}

// classify names a command the gateway sent: its scripts by the kind of
// their first item (batchScript's ARGV: the number of items, then each
// item's kind; MONITOR shows EVALSHA sha numkeys keys... args...). A call
// carries one item when requests come one at a time, as in the MONITOR
// run; a call of several counts as its first.
func classify(args []string) string {
	if len(args) == 0 {
		return "?"
	}
	cmd := strings.ToLower(args[0])
	if cmd == "evalsha" || cmd == "eval" {
		if len(args) >= 3 {
			if n, err := strconv.Atoi(args[2]); err == nil && len(args) > 3+n+1 {
				switch args[3+n+1] {
				case "a", "x", "l":
					return "admit" // an admission (with a budget, or without), or a lease admissions are taken from
				case "s":
					return "settle" // the bucket, and with a budget the period charged
				case "h":
					return "hold"
				}
			}
		}
		return cmd
	}
	switch {
	case cmd == "get" && len(args) >= 2 && strings.Contains(args[1], ":cache:"):
		return "answer-get"
	case cmd == "get" && len(args) >= 2 && strings.Contains(args[1], "guardrails:"):
		return "verdict-get"
	case cmd == "set" && len(args) >= 2 && (strings.Contains(args[1], "guardrails:") || strings.Contains(args[1], ":cache:")):
		return "cache-set"
	}
	return cmd
}

// lookups is the answer cache's GETs per request in Everything's measured
// runs, by payload and mode, medians over the rounds: Redis's GETs per
// request in E's runs less those in Lb's, whose scripts are E's (INFO
// commandstats counts the GETs a script runs too). lookupGets when every request
// looked the cache up once and the verdict cache's front in process
// answered every check.
func (b *bench) lookups() string {
	if !slices.Contains(b.o.configs, harness.LimitsBudget) {
		return fmt.Sprintf("not known without %s, whose scripts are E's", harness.LimitsBudget)
	}
	gets := func(ms []measure) float64 {
		var v []float64
		for _, m := range ms {
			v = append(v, m.redis["get"])
		}
		return median(v)
	}
	var parts []string
	for _, ur := range b.runs {
		for _, pr := range ur.results {
			for _, mode := range []string{closedLoop, openLoop} {
				runs := pr.runs[mode]
				parts = append(parts, fmt.Sprintf("%s %s (%s) %.2f", pr.p.Name, ur.upstream, mode,
					gets(runs[harness.Everything])-gets(runs[harness.LimitsBudget])))
			}
		}
	}
	return strings.Join(parts, ", ")
}
