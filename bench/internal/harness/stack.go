package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Configurations the benchmarks compare, in the order they run.
const (
	// Plain is Caddy's reverse_proxy alone: the baseline.
	Plain = "P"
	// Limits is the gateway with Redis limits, the breaker and routing.
	Limits = "L"
	// LimitsLocal is Limits with in-process buckets: no Redis round trip.
	// It is not one of issue 7's configurations; it tells what the round
	// trip costs.
	LimitsLocal = "Lm"
	// LimitsAllowance is Limits with local_allowance on: each instance
	// admits from slices of the Redis buckets, a Redis round trip per
	// lease rather than per request.
	LimitsAllowance = "La"
	// LimitsBudget is Limits with a budget far above the load: every
	// request also reserves its estimated cost and settles it when it
	// ends, one more script in Redis per request.
	LimitsBudget = "Lb"
	// Guardrails is Limits plus an uncached guardrails check.
	Guardrails = "G"
	// GuardrailsCached is Guardrails with the verdict cache (in Redis) hot.
	GuardrailsCached = "GC"
	// Cached is Limits with the exact answer cache (in Redis) hot: every
	// request names the concrete version and is a hit (see Prime), so the
	// upstream is never called; what it costs is a hit's.
	Cached = "C"
)

// Configs lists the configurations in the order they run.
var Configs = []string{Plain, Limits, LimitsBudget, LimitsLocal, LimitsAllowance, Guardrails, GuardrailsCached, Cached}

// Keys are the bearer keys the benchmarks spread requests over: each is an
// organization with buckets of its own, as real traffic has several.
var Keys = []string{"bench-key-1", "bench-key-2", "bench-key-3", "bench-key-4", "bench-key-5", "bench-key-6", "bench-key-7", "bench-key-8"}

// Stack is everything a benchmark drives: redis-server, the simulated
// upstream (one Caddy process), and one Caddy process serving plain
// reverse_proxy and the gateway's configurations on a port each.
type Stack struct {
	Dir       string
	Redis     *Redis
	Simulator *Process
	// GuardrailsStub is G's and GC's guardrails service (see
	// ServeGuardrailsStubIfAsked).
	GuardrailsStub *Process
	// UpstreamStub is the cheap upstream (see UpstreamStub).
	UpstreamStub *Process
	Proxy        *Process
	// SimulatorURL and StubURL are the upstreams' base URLs; URLs maps
	// each of Configs to its proxy's base URL.
	SimulatorURL, StubURL string
	URLs                  map[string]string
	// Upstream is the upstream the proxy forwards to: UpstreamStub (the
	// default) or UpstreamSimulator.
	Upstream string
	// ProxyAdmin is the proxy process's admin endpoint (pprof, expvar,
	// metrics), e.g. http://127.0.0.1:1234.
	ProxyAdmin string
	// Caddyfile is the proxy process's configuration, as written.
	Caddyfile string

	options       Options
	guardrailsURL string
	proxyAdmin    int
	sites         map[string]int
}

// Options are the choices a benchmark makes about the stack.
type Options struct {
	// UnbufferedLog writes the processes' logs with Caddy's file writer,
	// one write(2) per entry, instead of through the gateway's buffered
	// writer (as the embedded default Caddyfile does).
	UnbufferedLog bool
}

// StartStack builds the gateway and starts the stack in a new temporary
// directory. Call Stop when done, also after an error.
func StartStack(ctx context.Context, o Options) (*Stack, error) {
	dir, err := os.MkdirTemp("", "systemone-bench-")
	if err != nil {
		return nil, err
	}
	s := &Stack{Dir: dir, URLs: make(map[string]string), options: o}
	if err := s.start(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Stack) start(ctx context.Context) error {
	bin, err := BuildGateway(ctx, s.Dir)
	if err != nil {
		return err
	}
	if s.Redis, err = StartRedis(s.Dir); err != nil {
		return err
	}
	ports := make([]int, 3+len(Configs))
	for i := range ports {
		if ports[i], err = FreePort(); err != nil {
			return err
		}
	}
	simPort, simAdmin, proxyAdmin := ports[0], ports[1], ports[2]
	s.SimulatorURL = "http://127.0.0.1:" + strconv.Itoa(simPort)
	s.ProxyAdmin = "http://127.0.0.1:" + strconv.Itoa(proxyAdmin)

	simFile := filepath.Join(s.Dir, "simulator.Caddyfile")
	if err := os.WriteFile(simFile, []byte(simulatorCaddyfile(simPort, simAdmin, s.Dir, s.options)), 0o644); err != nil {
		return err
	}
	if s.Simulator, err = startCaddy("simulator", s.Dir, bin, simFile, []string{"127.0.0.1:" + strconv.Itoa(simPort)}); err != nil {
		return err
	}

	if s.GuardrailsStub, s.guardrailsURL, err = startGuardrailsStub(s.Dir); err != nil {
		return err
	}
	if s.UpstreamStub, s.StubURL, err = startUpstreamStub(s.Dir); err != nil {
		return err
	}

	s.sites, s.proxyAdmin, s.Upstream = make(map[string]int), proxyAdmin, UpstreamStub
	var addrs []string
	for i, name := range Configs {
		s.sites[name] = ports[3+i]
		s.URLs[name] = "http://127.0.0.1:" + strconv.Itoa(ports[3+i])
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(ports[3+i]))
	}
	s.Caddyfile = s.proxyCaddyfile()
	proxyFile := filepath.Join(s.Dir, "proxy.Caddyfile")
	if err := os.WriteFile(proxyFile, []byte(s.Caddyfile), 0o644); err != nil {
		return err
	}
	s.Proxy, err = startCaddy("proxy", s.Dir, bin, proxyFile, addrs)
	return err
}

func startCaddy(name, dir, bin, config string, addrs []string) (*Process, error) {
	p, err := StartProcess(name, dir, bin, "run", "--config", config, "--adapter", "caddyfile")
	if err != nil {
		return nil, err
	}
	for _, addr := range addrs {
		if err := p.WaitListening(addr, 30*time.Second); err != nil {
			p.Stop()
			return nil, err
		}
	}
	return p, nil
}

// UseUpstream points the proxy at upstream (UpstreamStub or
// UpstreamSimulator) with a config reload through its admin endpoint: the
// same process, so its CPU time keeps counting.
func (s *Stack) UseUpstream(ctx context.Context, upstream string) error {
	if upstream != UpstreamStub && upstream != UpstreamSimulator {
		return fmt.Errorf("unknown upstream %q (want %s or %s)", upstream, UpstreamStub, UpstreamSimulator)
	}
	if upstream == s.Upstream {
		return nil
	}
	s.Upstream = upstream
	s.Caddyfile = s.proxyCaddyfile()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.ProxyAdmin+"/load", strings.NewReader(s.Caddyfile))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("reloading the proxy: %s: %s", resp.Status, msg)
	}
	return nil
}

// UpstreamProcess is the process of the upstream in use.
func (s *Stack) UpstreamProcess() *Process {
	if s.Upstream == UpstreamSimulator {
		return s.Simulator
	}
	return s.UpstreamStub
}

// Stop stops every process and removes the directory.
func (s *Stack) Stop() {
	for _, p := range []*Process{s.Proxy, s.Simulator, s.GuardrailsStub, s.UpstreamStub} {
		if p != nil {
			p.Stop()
		}
	}
	if s.Redis != nil {
		s.Redis.Stop()
	}
	_ = os.RemoveAll(s.Dir)
}

// Alive reports an error if a process of the stack has exited.
func (s *Stack) Alive() error {
	for _, p := range []*Process{s.Proxy, s.Simulator, s.GuardrailsStub, s.UpstreamStub, s.Redis.Process} {
		if p.Exited() {
			return fmt.Errorf("%s exited:\n%s", p.Name, p.Tail(20))
		}
	}
	return nil
}

// globalOptions keep a process local and its log in one file: no config
// saved, no HTTPS. One log, so that Caddy encodes each entry's fields once.
// At info level it holds the gateway's request log (written as in
// production: it is part of the gateway's cost) and nothing per request
// from Caddy itself. The log is buffered as in the embedded default
// Caddyfile, unless o says not to.
func globalOptions(admin int, dir, name string, o Options) string {
	output := "output file " + filepath.Join(dir, name+".caddy.log")
	if !o.UnbufferedLog {
		output = "output buffered {\n\t\t\t" + output + "\n\t\t}"
	}
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	auto_https off
	grace_period 1s
	log default {
		%s
		format json
		level INFO
	}
}
`, admin, output)
}

// simulatorCaddyfile serves the upstream as fast as it goes: no latency,
// no per-key limits, no token budgets (the large payloads exceed them).
func simulatorCaddyfile(port, admin int, dir string, o Options) string {
	return globalOptions(admin, dir, "simulator", o) + fmt.Sprintf(`
:%d {
	bind 127.0.0.1
	systemone_simulator {
		requests_per_minute 0
		tokens_per_second   0
		max_tokens          0
		max_question_tokens 0
	}
}
`, port)
}

// proxyCaddyfile serves each configuration on its own port, in front of the
// same upstream. The limits are far above the load, so that the checks run
// on every request and never refuse one.
func (s *Stack) proxyCaddyfile() string {
	admin, dir, guardrailsURL, sites := s.proxyAdmin, s.Dir, s.guardrailsURL, s.sites
	up := strings.TrimPrefix(s.SimulatorURL, "http://")
	if s.Upstream == UpstreamStub {
		up = strings.TrimPrefix(s.StubURL, "http://")
	}
	redis := fmt.Sprintf("\t\tredis %s\n", s.Redis.URL())
	limits := `		limits {
			requests_per_minute 10000000
			tokens_per_second   10000000
			token_burst         10000000
		}
`
	policies := `		breaker {
			failures  5
			open_for  30s
			half_open 1
		}
		route {
			pin service-1.0.0 {
				noul   0.8
				choice 0.6
				score  0.5
			}
			unpinned human
		}
`
	guardrails := func(extra string) string {
		return fmt.Sprintf(`		guardrails %s {
			api_key bench-guardrails-key
			timeout 2s
%s		}
`, guardrailsURL, extra)
	}
	allowance := strings.Replace(limits, "\t\t}\n", "\t\t\tlocal_allowance 2% 100ms\n\t\t}\n", 1)
	// A million yuan a day at 0.042 yuan per million tokens: never spent.
	budget := strings.Replace(limits, "\t\t}\n", "\t\t\tbudget 1000000 per day\n\t\t}\n", 1)
	gateway := map[string]string{
		Limits:           redis + limits + policies,
		LimitsAllowance:  redis + allowance + policies,
		LimitsBudget:     redis + budget + policies,
		LimitsLocal:      limits + policies,
		Guardrails:       redis + limits + policies + guardrails(""),
		GuardrailsCached: redis + limits + policies + guardrails("\t\t\tcache 10m\n"),
		// A day: entries stored at a payload's warm-up outlive the run.
		Cached: redis + limits + policies + "\t\tcache {\n\t\t\tttl 24h\n\t\t\tmax_size 8MiB\n\t\t}\n",
	}
	var b strings.Builder
	b.WriteString(globalOptions(admin, dir, "proxy", s.options))
	for _, name := range Configs {
		fmt.Fprintf(&b, "\n# %s\n:%d {\n\tbind 127.0.0.1\n", name, sites[name])
		if name != Plain {
			b.WriteString("\tsystemone {\n" + gateway[name] + "\t}\n")
		}
		fmt.Fprintf(&b, "\treverse_proxy %s\n}\n", up)
	}
	return b.String()
}

// Get fetches url with a short timeout and returns the body of a 200.
func Get(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New(url + ": " + resp.Status)
	}
	return body, nil
}
