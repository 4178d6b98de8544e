// Command load measures the gateway against plain Caddy reverse_proxy in one
// run, on this machine, over loopback:
//
//	go run ./bench/load                 # the full run BENCHMARKS.md reports
//	go run ./bench/load -smoke          # seconds: CI's check that it still works
//
// It builds cmd/systemone-gateway and starts a redis-server, two upstreams
// (a stub that answers each payload with the simulator's answer to it and
// costs next to nothing, as a remote service does seen from this machine;
// and the simulated service itself, no latency, no limits, no token
// budgets), a guardrails stub (the stubs are this program, run again; see
// harness.ServeGuardrailsStubIfAsked), and the proxies, all in front of the
// same upstream, a configuration on a port each. One Caddy process serves,
// its log through the buffered writer as the default Caddyfile writes it:
//
//	P   plain reverse_proxy
//	L   the gateway: Redis limits (the default adaptive allowance, which
//	    leases the benchmark's fast organizations), breaker and routing
//	Lx  L with local_allowance off: every admission exact, a script each
//	Lb  L with a budget never reached: a reservation and its settlement per request
//	Lm  L with in-process limits: what L costs without its Redis round trip
//	La  L with local_allowance 2% 100ms: every organization leased
//	G   L plus guardrails against a fast stub service, uncached
//	GC  G with the verdict cache (in Redis) hot
//	C   L with the exact answer cache (in Redis) hot: every request a hit,
//	    the upstream never called (the requests name service-1.0.0)
//	E   everything on, in the same Redis: Lb's limits and budget, the
//	    breaker, GC's guardrails, routing with audit 0.1 and the review
//	    queue, and the answer cache looked up and missing on every request
//	    (the requests ask the alias, whose answers are never stored)
//	X   L with an escalate block taking every answer the pin routes human:
//	    the payload's unsure questions asked again of service-2.0.0, a
//	    second upstream call per request (none for a payload the pin is
//	    sure of)
//	Xn  L with an escalate block that escalates no question a payload
//	    asks: what a request not escalated costs
//
// a second Caddy process serves L and Lm again with its log through Caddy's
// own file writer (one write(2) per entry), and nginx, when installed, the
// reference rows:
//
//	Lu  L, Caddy's own file writer
//	Lmu Lm, Caddy's own file writer
//	N   nginx proxy_pass, no access log (P writes none)
//	Nl  N with limit_req keyed on the Authorization header, far above the
//	    load, and a buffered access log line per request
//
// The headline tables are measured in front of the stub; then the proxies
// are pointed at the simulator for a second set (-sim-payloads).
//
// For each payload it drives each configuration in turn, alternating (P, L,
// Lb, ..., Nl, P, L, ...) for several rounds, first at a fixed concurrency
// and then at a fixed rate, and prints per configuration the medians over
// the rounds of requests/s, p50/p90/p99 latency, CPU time per request of
// each process (the proxy being the process that serves the configuration),
// Redis commands per request, and the ratios to P measured in the same
// round; then judges the targets (on the small and 32 KiB payloads). It
// also counts,
// with MONITOR, the Redis commands each gateway configuration sends per
// request and when.
//
// Every answer is checked: a status other than 200, a body that differs
// from the upstream's own answer to the same request, or missing gateway
// headers ends the run with an error and a non-zero exit status.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/systemone/systemone-gateway/bench/internal/harness"
	"github.com/systemone/systemone-gateway/bench/payload"
	"github.com/systemone/systemone-gateway/evaluation"
)

type options struct {
	duration    time.Duration
	rounds      int
	concurrency int
	rateShare   float64
	payloads    []string
	simPayloads []string
	profileDir  string
	smoke       bool
	unbuffered  bool
	// configs are the configurations measured, in the order they run, P
	// first (see selectConfigs).
	configs []string
}

func main() {
	harness.ServeGuardrailsStubIfAsked()
	o, err := parseArgs(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
}

// parseArgs reads the command line into options, the configurations
// those -configs names (see selectConfigs).
func parseArgs(args []string) (options, error) {
	var o options
	var names, simNames string
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "length of each measured run (one configuration, one payload, one mode)")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds over the configurations; medians are reported")
	fs.IntVar(&o.concurrency, "concurrency", 32, "clients in the fixed-concurrency runs")
	fs.Float64Var(&o.rateShare, "rate", 0.3, "fixed rate, as a share of P's fixed-concurrency throughput for the payload")
	fs.StringVar(&names, "payloads", strings.Join(payload.Names(), ","), "comma-separated payloads, in front of the cheap upstream stub (the headline tables)")
	fs.StringVar(&simNames, "sim-payloads", "small-en,32k-en", "comma-separated payloads measured again in front of the simulator; empty for none")
	fs.StringVar(&o.profileDir, "profile", "", "after measuring, write CPU profiles of the Caddy proxies under each of their configurations, and the first proxy's allocation profile, to this directory")
	fs.BoolVar(&o.unbuffered, "unbuffered-log", false, "write the first proxy's log with Caddy's file writer, one write(2) per entry, instead of the buffered writer of the default Caddyfile (Lu and Lmu always do)")
	fs.BoolVar(&o.smoke, "smoke", false, "a few seconds: the small payload, one short round; checks every answer, judges no target")
	configs := fs.String("configs", strings.Join(harness.AllConfigs(), ","), "comma-separated configurations to measure; P is always measured, first")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.configs, err = selectConfigs(*configs); err != nil {
		return o, err
	}
	if o.smoke {
		o.duration, o.rounds, o.concurrency = 400*time.Millisecond, 1, 4
		names, simNames = "small-en", ""
	}
	o.payloads = strings.Split(names, ",")
	if simNames != "" {
		o.simPayloads = strings.Split(simNames, ",")
	}
	return o, nil
}

func getPayloads(names []string) ([]payload.Payload, error) {
	var payloads []payload.Payload
	for _, name := range names {
		p, err := payload.Get(strings.TrimSpace(name))
		if err != nil {
			return nil, err
		}
		payloads = append(payloads, p)
	}
	return payloads, nil
}

func run(ctx context.Context, o options, out io.Writer) error {
	payloads, err := getPayloads(o.payloads)
	if err != nil {
		return err
	}
	simPayloads, err := getPayloads(o.simPayloads)
	if err != nil {
		return err
	}
	if o.duration <= 0 || o.rounds < 1 || o.concurrency < 1 || o.rateShare <= 0 {
		return errors.New("-duration, -rounds, -concurrency and -rate must be positive")
	}

	fmt.Fprintln(out, "# systemone-gateway load benchmark")
	fmt.Fprintln(out)
	printMachine(out)
	fmt.Fprintf(out, "runs: %d rounds of %v per configuration, payload and mode; %d clients at fixed concurrency; fixed rate %.0f%% of P's throughput\n",
		o.rounds, o.duration, o.concurrency, 100*o.rateShare)
	fmt.Fprintf(out, "organizations: %d bearer keys, requests spread round-robin (E: 32 keys for each, see harness.Requests)\n", len(harness.Keys))
	printPayloads(out, payloads)

	var skipped []string
	if o.configs, skipped = skipNginxIfAbsent(o.configs); len(skipped) > 0 {
		fmt.Fprintf(out, "\nnginx not found (Debian's nginx-light provides it): %s skipped\n", strings.Join(skipped, " and "))
	}
	fmt.Fprintf(out, "\nconfigurations: %s\n\n", strings.Join(o.configs, ", "))
	fmt.Fprintln(out, "starting: go build ./cmd/systemone-gateway, redis-server, simulator, upstream stub, guardrails stub, proxies ...")
	stack, err := harness.StartStack(ctx, harness.Options{UnbufferedLog: o.unbuffered, Configs: o.configs})
	if err != nil {
		return err
	}
	defer stack.Stop()
	fmt.Fprintf(out, "\nproxy Caddyfile (upstream: the stub at %s; for the second tables, systemone_simulator with latency 0, limits and token budgets off, at %s):\n\n",
		stack.StubURL, stack.SimulatorURL)
	fmt.Fprintln(out, indent(stack.Caddyfile))
	if stack.UnbufferedCaddyfile != "" {
		fmt.Fprintf(out, "\nsecond proxy's Caddyfile (%s and %s again, the log through Caddy's own file writer):\n\n", harness.LimitsUnbuffered, harness.LimitsLocalUnbuffered)
		fmt.Fprintln(out, indent(stack.UnbufferedCaddyfile))
	}
	if stack.NginxConf != "" {
		fmt.Fprintf(out, "\nnginx.conf (%s, one process):\n\n", harness.NginxPath())
		fmt.Fprintln(out, indent(stack.NginxConf))
	}

	b := &bench{o: o, stack: stack, driver: harness.NewDriver(4 * o.concurrency), out: out}
	defer b.driver.Close()
	head := &upstreamRun{upstream: harness.UpstreamStub}
	b.runs = append(b.runs, head)
	for _, p := range payloads {
		if err := b.payload(ctx, head, p); err != nil {
			return fmt.Errorf("payload %s: %w", p.Name, err)
		}
	}
	if err := b.countRoundTrips(ctx, payloads[0]); err != nil {
		return err
	}
	if o.profileDir != "" {
		if err := b.profile(ctx, payloads); err != nil {
			return err
		}
	}
	if len(simPayloads) > 0 {
		if err := stack.UseUpstream(ctx, harness.UpstreamSimulator); err != nil {
			return err
		}
		sim := &upstreamRun{upstream: harness.UpstreamSimulator}
		b.runs = append(b.runs, sim)
		for _, p := range simPayloads {
			if err := b.payload(ctx, sim, p); err != nil {
				return fmt.Errorf("payload %s (simulator): %w", p.Name, err)
			}
		}
	}
	b.report()
	fmt.Fprint(out, b.roundTrips.String())
	hits, misses := harness.CachedAnswers.Hits.Load(), harness.CachedAnswers.Misses.Load()
	fmt.Fprintf(out, "\n%s's checked answers: %d hits, %d misses (a Redis lookup over the cache's 100 ms timeout is a miss, forwarded)\n",
		harness.Cached, hits, misses)
	if slices.Contains(o.configs, harness.Everything) {
		fmt.Fprintf(out, "%s's checked answers: %d misses, no hit (the alias's answers are never stored); answer cache GETs per request in its measured runs (E's GETs less Lb's; 3 a lookup: the entry, the key's record and another instance's marker; more while a request waited on another instance's identical one, fewer while the cache rested Redis): %s\n",
			harness.Everything, harness.MissedAnswers.Load(), b.lookups())
	}
	return stack.Alive()
}

// bench holds one run's stack and measurements.
type bench struct {
	o      options
	stack  *harness.Stack
	driver *harness.Driver
	out    io.Writer

	runs       []*upstreamRun
	roundTrips strings.Builder // the MONITOR count's table
	restNotes  []string        // lookups the answer cache skipped while resting Redis
}

// upstreamRun is the measurements in front of one upstream.
type upstreamRun struct {
	upstream string
	results  []payloadResult
	rtt      []time.Duration // Redis PING round trips during L's fixed-rate runs
}

// Modes of a run.
const (
	closedLoop = "concurrency"
	openLoop   = "rate"
)

type payloadResult struct {
	p    payload.Payload
	rate float64 // of the open-loop runs
	// escalation is what X asks again of the payload.
	escalation harness.Escalation
	// runs[mode][config] holds one measurement per round.
	runs map[string]map[string][]measure
}

// measure is one run of one configuration.
type measure struct {
	res harness.Result
	// cpu is CPU time per request of each process: proxy, simulator,
	// guardrails (the stub), redis, and client (this program).
	cpu map[string]time.Duration
	// redis is Redis commands run per request, by command.
	redis map[string]float64
	// redisReads is reads from client sockets per request in Redis: round
	// trips, a pipeline arriving at once counting one.
	redisReads float64
	// others is the share of the machine's CPU time that processes
	// outside the benchmark used during the run: other load skews it.
	others float64
}

func (b *bench) payload(ctx context.Context, ur *upstreamRun, p payload.Payload) error {
	// The reference: the upstream's own answer, asked directly, twice (the
	// simulator must be deterministic for the comparison to mean anything).
	want, err := b.stack.Reference(ctx, b.driver, p.Body)
	if err != nil {
		return err
	}

	pr := payloadResult{p: p, runs: map[string]map[string][]measure{closedLoop: {}, openLoop: {}}}
	reqs := make(map[string][]harness.Request)
	for _, c := range b.o.configs {
		var esc harness.Escalation
		if reqs[c], esc, err = b.requests(ctx, c, p.Body, want); err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
		if c == harness.Escalated {
			pr.escalation = esc
			fmt.Fprintf(b.out, "%s (%s upstream), %s: %s\n", p.Name, ur.upstream, c, esc)
		}
		if c == harness.Cached {
			if err := b.stack.Prime(ctx, b.driver, reqs[c]); err != nil {
				return err
			}
		}
		// Warm up: connections, scripts loaded in Redis, the caches.
		warm := b.driver.Closed(ctx, reqs[c], b.o.concurrency, min(b.o.duration/2, time.Second))
		if warm.Err != nil {
			return fmt.Errorf("%s (warm-up): %w", c, warm.Err)
		}
	}
	fmt.Fprintf(b.out, "%s (%s upstream): fixed concurrency ...\n", p.Name, ur.upstream)
	for range b.o.rounds {
		for _, c := range b.o.configs {
			m, err := b.measure(ctx, c, func() harness.Result {
				return b.driver.Closed(ctx, reqs[c], b.o.concurrency, b.o.duration)
			})
			if err != nil {
				return fmt.Errorf("%s at fixed concurrency: %w", c, err)
			}
			pr.runs[closedLoop][c] = append(pr.runs[closedLoop][c], m)
		}
	}
	pr.rate = b.o.rateShare * median(throughputs(pr.runs[closedLoop][harness.Plain]))
	fmt.Fprintf(b.out, "%s (%s upstream): fixed rate %.0f/s ...\n", p.Name, ur.upstream, pr.rate)
	for range b.o.rounds {
		for _, c := range b.o.configs {
			var stopPing func() []time.Duration
			if c == harness.Limits {
				stopPing = b.pingRedis(ctx)
			}
			m, err := b.measure(ctx, c, func() harness.Result {
				return b.driver.Open(ctx, reqs[c], pr.rate, b.o.duration, 4*b.o.concurrency)
			})
			var pings int
			if stopPing != nil {
				rtt := stopPing()
				ur.rtt, pings = append(ur.rtt, rtt...), len(rtt)
			}
			m.redisReads -= float64(pings) / float64(max(m.res.Requests, 1))
			if err != nil {
				return fmt.Errorf("%s at fixed rate: %w", c, err)
			}
			pr.runs[openLoop][c] = append(pr.runs[openLoop][c], m)
		}
	}
	ur.results = append(ur.results, pr)
	return nil
}

// requests returns config's requests for body, whose upstream answer is
// want: X's expect the answer its escalation gives, and the escalation
// says which questions it asks again (harness.EscalatedRequests).
func (b *bench) requests(ctx context.Context, config string, body, want []byte) ([]harness.Request, harness.Escalation, error) {
	if config == harness.Escalated {
		return b.stack.EscalatedRequests(ctx, b.driver, body, want)
	}
	return b.stack.Requests(config, body, want), harness.Escalation{}, nil
}

// measure runs drive and reads the processes' CPU time and Redis's command
// counters around it.
func (b *bench) measure(ctx context.Context, config string, drive func() harness.Result) (measure, error) {
	procs := map[string]int{
		"proxy": b.stack.ProxyOf(config).PID(), "upstream": b.stack.UpstreamProcess().PID(),
		"guardrails": b.stack.GuardrailsStub.PID(), "redis": b.stack.Redis.PID(), "client": 0,
	}
	cpuBefore := make(map[string]time.Duration)
	for name, pid := range procs {
		t, err := harness.CPUTime(pid)
		if err != nil {
			return measure{}, err
		}
		cpuBefore[name] = t
	}
	callsBefore, err := b.stack.Redis.CommandCalls(ctx)
	if err != nil {
		return measure{}, err
	}
	readsBefore, err := b.stack.Redis.ReadsProcessed(ctx)
	if err != nil {
		return measure{}, err
	}
	systemBefore, err := harness.SystemCPU()
	if err != nil {
		return measure{}, err
	}
	res := drive()
	systemAfter, err := harness.SystemCPU()
	if err != nil {
		return measure{}, err
	}
	if res.Err != nil {
		return measure{}, res.Err
	}
	if res.Requests == 0 {
		return measure{}, errors.New("no request completed")
	}
	m := measure{res: res, cpu: make(map[string]time.Duration), redis: make(map[string]float64)}
	others := systemAfter - systemBefore
	for name, pid := range procs {
		t, err := harness.CPUTime(pid)
		if err != nil {
			return measure{}, err
		}
		others -= t - cpuBefore[name]
		m.cpu[name] = (t - cpuBefore[name]) / time.Duration(res.Requests)
	}
	m.others = max(float64(others)/float64(res.Elapsed)/float64(runtime.NumCPU()), 0)
	readsAfter, err := b.stack.Redis.ReadsProcessed(ctx)
	if err != nil {
		return measure{}, err
	}
	// Less the one read of the INFO that read the counter before.
	m.redisReads = float64(readsAfter-readsBefore-1) / float64(res.Requests)
	callsAfter, err := b.stack.Redis.CommandCalls(ctx)
	if err != nil {
		return measure{}, err
	}
	for cmd, n := range harness.CallsDelta(callsBefore, callsAfter) {
		if cmd != "ping" { // the RTT probe's
			m.redis[cmd] = float64(n) / float64(res.Requests)
		}
	}
	return m, b.stack.Alive()
}

// pingRedis measures Redis round trips (PING, from this process) every few
// milliseconds until the returned function is called.
func (b *bench) pingRedis(ctx context.Context) func() []time.Duration {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan []time.Duration)
	go func() {
		var rtts []time.Duration
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				done <- rtts
				return
			case <-tick.C:
			}
			t := time.Now()
			if b.stack.Redis.Client.Ping(ctx).Err() == nil {
				rtts = append(rtts, time.Since(t))
			}
		}
	}()
	return func() []time.Duration {
		cancel()
		return <-done
	}
}

func printMachine(out io.Writer) {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if name, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	fmt.Fprintf(out, "machine: %d CPUs (%s), %s %s/%s; every process shares them\n",
		runtime.NumCPU(), model, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func printPayloads(out io.Writer, payloads []payload.Payload) {
	fmt.Fprintln(out, "\npayloads (POST /v1/systemone, model service-latest, text of a support conversation):")
	fmt.Fprintln(out)
	tw := newTable(out, "payload", "body bytes", "state bytes", "questions", "estimated tokens")
	for _, p := range payloads {
		est := "?"
		if r, err := evaluation.ParseRequest(p.Body); err == nil {
			est = fmt.Sprint(r.EstimatedTokens)
		}
		tw.row(p.Name, fmt.Sprint(len(p.Body)), fmt.Sprint(p.StateBytes), fmt.Sprint(p.Questions), est)
	}
	tw.flush()
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// selectConfigs returns the configurations named in list (a comma-separated
// subset of harness.AllConfigs), in their usual order, P always first:
// every ratio is to P measured in the same round.
func selectConfigs(list string) ([]string, error) {
	all := harness.AllConfigs()
	want := map[string]bool{harness.Plain: true}
	for _, c := range strings.Split(list, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		if !slices.Contains(all, c) {
			return nil, fmt.Errorf("-configs: unknown configuration %q (want some of %s)", c, strings.Join(all, ","))
		}
		want[c] = true
	}
	return slices.DeleteFunc(all, func(c string) bool { return !want[c] }), nil
}

// skipNginxIfAbsent returns configs without nginx's configurations when
// nginx is not installed, and those it left out; configs itself is left as
// it was.
func skipNginxIfAbsent(configs []string) (kept, skipped []string) {
	if harness.NginxPath() != "" {
		return configs, nil
	}
	kept = slices.DeleteFunc(slices.Clone(configs), func(c string) bool {
		if harness.IsNginx(c) {
			skipped = append(skipped, c)
			return true
		}
		return false
	})
	return kept, skipped
}
