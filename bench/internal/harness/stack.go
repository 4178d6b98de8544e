package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/systemone/systemone-gateway/evaluation"
)

// Configurations the benchmarks compare, in the order they run.
const (
	// Plain is Caddy's reverse_proxy alone: the baseline.
	Plain = "P"
	// Limits is the gateway with Redis limits, the breaker and routing:
	// the default adaptive allowance, which leases the buckets of the
	// benchmark's organizations (fast, on limits far above the load).
	Limits = "L"
	// LimitsExact is Limits with local_allowance off: every admission one
	// exact Redis script, a round trip per request (many admissions share
	// a script call under load).
	LimitsExact = "Lx"
	// LimitsLocal is Limits with in-process buckets: no Redis round trip.
	// It tells what the round trip costs.
	LimitsLocal = "Lm"
	// LimitsAllowance is Limits with local_allowance 2% 100ms: every
	// organization admitted from slices of the Redis buckets, whatever its
	// pace, a Redis round trip per lease rather than per request.
	LimitsAllowance = "La"
	// LimitsBudget is Limits with a budget far above the load: every
	// request also reserves its estimated cost and settles it when it
	// ends.
	LimitsBudget = "Lb"
	// Guardrails is Limits plus an uncached guardrails check.
	Guardrails = "G"
	// GuardrailsCached is Guardrails with the verdict cache (in Redis) hot.
	GuardrailsCached = "GC"
	// Cached is Limits with the exact answer cache (in Redis) hot: every
	// request names the concrete version and is a hit (see Prime), so the
	// upstream is never called; what it costs is a hit's.
	Cached = "C"
	// Everything is every policy at once, all in the same Redis: Redis
	// limits with a budget never reached, the breaker, guardrails with
	// the verdict cache hot, routing with an audit share and the review
	// queue, and the answer cache on and missing on every request (the
	// requests ask the alias, whose answers are never stored, and no two
	// requests in flight are identical: see Requests).
	Everything = "E"
	// Escalated is Limits with an escalate block whose second version
	// takes every question the pin routes human (thresholds 0): each of a
	// payload's questions below the pin's threshold is asked again of
	// service-2.0.0 in one second call, and the client gets its answers
	// (see EscalatedReference). What it adds to Limits is the second
	// call.
	Escalated = "X"
	// EscalationIdle is Limits with an escalate block for the same
	// version whose one line names a question no payload asks: every
	// answer is looked at for escalation and none is escalated. What it
	// adds to Limits is the cost of a request not escalated.
	EscalationIdle = "Xn"
	// LimitsUnbuffered and LimitsLocalUnbuffered are Limits and
	// LimitsLocal again, served by a second Caddy process that writes its
	// log with Caddy's own file writer (one write(2) per entry) instead
	// of the buffered writer of the first process.
	LimitsUnbuffered      = "Lu"
	LimitsLocalUnbuffered = "Lmu"
	// Nginx is nginx's proxy_pass to the same upstream, a reference row:
	// one nginx process, writing no access log, as P writes none.
	Nginx = "N"
	// NginxLimits is Nginx with limit_req keyed on the Authorization
	// header, at a rate far above the load, and a buffered access log
	// line per request, as the gateway logs each request.
	NginxLimits = "Nl"
)

// AllConfigs returns every configuration, in the order they run, P first
// (every ratio is to P measured in the same round). Each call returns a new
// slice, the caller's to keep or trim.
func AllConfigs() []string {
	return []string{Plain, Limits, LimitsExact, LimitsBudget, LimitsLocal, LimitsAllowance, Guardrails, GuardrailsCached, Cached,
		Everything, Escalated, EscalationIdle, LimitsUnbuffered, LimitsLocalUnbuffered, Nginx, NginxLimits}
}

// The processes that serve the configurations (see Stack.ProxyOf).
const (
	proxyMain       = "proxy"
	proxyUnbuffered = "proxy-unbuffered"
	proxyNginx      = "nginx"
)

// servedBy names the process that serves config.
func servedBy(config string) string {
	switch config {
	case LimitsUnbuffered, LimitsLocalUnbuffered:
		return proxyUnbuffered
	case Nginx, NginxLimits:
		return proxyNginx
	}
	return proxyMain
}

// IsNginx reports whether config is one of nginx's reference rows.
func IsNginx(config string) bool { return servedBy(config) == proxyNginx }

// IsGateway reports whether config goes through the gateway's systemone
// handler.
func IsGateway(config string) bool { return config != Plain && !IsNginx(config) }

// InFirstProxy reports whether config is served by the first Caddy
// process (Stack.Proxy), the one the soak samples.
func InFirstProxy(config string) bool { return servedBy(config) == proxyMain }

// Keys are the bearer keys the benchmarks spread requests over: each is an
// organization with buckets of its own, as real traffic has several.
var Keys = []string{"bench-key-1", "bench-key-2", "bench-key-3", "bench-key-4", "bench-key-5", "bench-key-6", "bench-key-7", "bench-key-8"}

// missKeys are Everything's bearer keys, 32 organizations per key of
// Keys: the answer cache makes an identical miss wait for the one at the
// upstream and take its answer (see docs/cache.md), so identical requests
// in flight at once would measure a wait, not a request. Sent
// round-robin, 256 organizations keep every request in flight distinct at
// the benchmark's concurrency (32 clients; at most 128 workers at the fixed
// rate) unless one request takes as long as 256 others.
var missKeys = func() []string {
	var keys []string
	for i := range 32 {
		for _, k := range Keys {
			keys = append(keys, fmt.Sprintf("%s-e%02d", k, i+1))
		}
	}
	return keys
}()

// Stack is everything a benchmark drives: redis-server, the simulated
// upstream (one Caddy process), the stubs, and the proxies: one Caddy
// process serving plain reverse_proxy and the gateway's configurations on a
// port each, a second one serving LimitsUnbuffered and
// LimitsLocalUnbuffered, and nginx serving Nginx and NginxLimits (each of
// the last two only when one of its configurations is in Options.Configs).
type Stack struct {
	Dir       string
	Redis     *Redis
	Simulator *Process
	// GuardrailsStub is G's and GC's guardrails service (see
	// ServeGuardrailsStubIfAsked).
	GuardrailsStub *Process
	// UpstreamStub is the cheap upstream (see UpstreamStub).
	UpstreamStub *Process
	// Proxy is the first Caddy process: P and the gateway's
	// configurations, its log through the buffered writer.
	Proxy *Process
	// UnbufferedProxy is the second Caddy process, its log through Caddy's
	// own file writer; nil unless it serves a configuration of
	// Options.Configs.
	UnbufferedProxy *Process
	// Nginx is the nginx process; nil unless it serves a configuration of
	// Options.Configs.
	Nginx *Process
	// SimulatorURL and StubURL are the upstreams' base URLs; URLs maps
	// each of Options.Configs to its proxy's base URL.
	SimulatorURL, StubURL string
	URLs                  map[string]string
	// Upstream is the upstream the proxies forward to: UpstreamStub (the
	// default) or UpstreamSimulator.
	Upstream string
	// ProxyAdmin and UnbufferedProxyAdmin are the Caddy processes' admin
	// endpoints (pprof, expvar, metrics), e.g. http://127.0.0.1:1234.
	ProxyAdmin, UnbufferedProxyAdmin string
	// Caddyfile, UnbufferedCaddyfile and NginxConf are the proxies'
	// configurations, as written (empty for a process not started).
	Caddyfile, UnbufferedCaddyfile, NginxConf string

	options       Options
	bin           string
	guardrailsURL string
	admins        map[string]int // Caddy proxy process -> admin port
	sites         map[string]int
	// stubAnswers are the request bodies the stub has an answer for, by
	// length.
	stubAnswers map[int]string
}

// Options are the choices a benchmark makes about the stack.
type Options struct {
	// UnbufferedLog writes the first proxy's and the simulator's logs with
	// Caddy's file writer, one write(2) per entry, instead of through the
	// gateway's buffered writer (as the embedded default Caddyfile does).
	// The second proxy writes its log that way in any case.
	UnbufferedLog bool
	// Configs are the configurations the stack serves, each one of
	// AllConfigs, in the order they run. Nil (the default) serves
	// AllConfigs().
	Configs []string
}

// StartStack builds the gateway and starts the stack in a new temporary
// directory. Call Stop when done, also after an error.
func StartStack(ctx context.Context, o Options) (*Stack, error) {
	if o.Configs == nil {
		o.Configs = AllConfigs()
	}
	o.Configs = slices.Clone(o.Configs) // the stack's own: a caller's later change is not served
	for _, c := range o.Configs {
		if !slices.Contains(AllConfigs(), c) {
			return nil, fmt.Errorf("unknown configuration %q (want some of %s)", c, strings.Join(AllConfigs(), ","))
		}
	}
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
	var err error
	if s.bin, err = BuildGateway(ctx, s.Dir); err != nil {
		return err
	}
	if s.Redis, err = StartRedis(s.Dir); err != nil {
		return err
	}
	ports := make([]int, 4+len(s.options.Configs))
	for i := range ports {
		if ports[i], err = FreePort(); err != nil {
			return err
		}
	}
	simPort, simAdmin := ports[0], ports[1]
	s.admins = map[string]int{proxyMain: ports[2], proxyUnbuffered: ports[3]}
	s.SimulatorURL = "http://127.0.0.1:" + strconv.Itoa(simPort)
	s.ProxyAdmin = "http://127.0.0.1:" + strconv.Itoa(ports[2])

	simFile := filepath.Join(s.Dir, "simulator.Caddyfile")
	if err := os.WriteFile(simFile, []byte(simulatorCaddyfile(simPort, simAdmin, s.Dir, s.options)), 0o644); err != nil {
		return err
	}
	if s.Simulator, err = startCaddy("simulator", s.Dir, s.bin, simFile, []string{"127.0.0.1:" + strconv.Itoa(simPort)}); err != nil {
		return err
	}

	if s.GuardrailsStub, s.guardrailsURL, err = startGuardrailsStub(s.Dir); err != nil {
		return err
	}
	if s.UpstreamStub, s.StubURL, err = startUpstreamStub(s.Dir); err != nil {
		return err
	}

	s.sites, s.Upstream = make(map[string]int), UpstreamStub
	for i, name := range s.options.Configs {
		s.sites[name] = ports[4+i]
		s.URLs[name] = "http://127.0.0.1:" + strconv.Itoa(ports[4+i])
	}
	s.Caddyfile = s.proxyCaddyfile(proxyMain)
	if s.Proxy, err = s.startProxy(proxyMain, s.Caddyfile); err != nil {
		return err
	}
	if len(s.configsOf(proxyUnbuffered)) > 0 {
		s.UnbufferedProxyAdmin = "http://127.0.0.1:" + strconv.Itoa(s.admins[proxyUnbuffered])
		s.UnbufferedCaddyfile = s.proxyCaddyfile(proxyUnbuffered)
		if s.UnbufferedProxy, err = s.startProxy(proxyUnbuffered, s.UnbufferedCaddyfile); err != nil {
			return err
		}
	}
	return s.startNginx()
}

// configsOf returns the configurations of Options.Configs that proxy
// serves.
func (s *Stack) configsOf(proxy string) []string {
	var out []string
	for _, c := range s.options.Configs {
		if servedBy(c) == proxy {
			out = append(out, c)
		}
	}
	return out
}

// startProxy starts the Caddy process proxy with caddyfile and waits
// until it listens on its configurations' ports.
func (s *Stack) startProxy(proxy, caddyfile string) (*Process, error) {
	file := filepath.Join(s.Dir, proxy+".Caddyfile")
	if err := os.WriteFile(file, []byte(caddyfile), 0o644); err != nil {
		return nil, err
	}
	var addrs []string
	for _, c := range s.configsOf(proxy) {
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(s.sites[c]))
	}
	return startCaddy(proxy, s.Dir, s.bin, file, addrs)
}

// ProxyOf returns the process that serves config: the one whose CPU time a
// request to config costs as "proxy".
func (s *Stack) ProxyOf(config string) *Process {
	switch servedBy(config) {
	case proxyUnbuffered:
		return s.UnbufferedProxy
	case proxyNginx:
		return s.Nginx
	}
	return s.Proxy
}

// AdminOf returns the admin endpoint of the Caddy process that serves
// config, or "" for nginx's.
func (s *Stack) AdminOf(config string) string {
	switch servedBy(config) {
	case proxyUnbuffered:
		return s.UnbufferedProxyAdmin
	case proxyNginx:
		return ""
	}
	return s.ProxyAdmin
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

// UseUpstream points the proxies at upstream (UpstreamStub or
// UpstreamSimulator): the Caddy processes with a config reload through
// their admin endpoints (the same processes, so their CPU time keeps
// counting), nginx by starting it again with the new configuration.
func (s *Stack) UseUpstream(ctx context.Context, upstream string) error {
	if upstream != UpstreamStub && upstream != UpstreamSimulator {
		return fmt.Errorf("unknown upstream %q (want %s or %s)", upstream, UpstreamStub, UpstreamSimulator)
	}
	if upstream == s.Upstream {
		return nil
	}
	s.Upstream = upstream
	s.Caddyfile = s.proxyCaddyfile(proxyMain)
	if err := reload(ctx, s.ProxyAdmin, s.Caddyfile); err != nil {
		return err
	}
	if s.UnbufferedProxy != nil {
		s.UnbufferedCaddyfile = s.proxyCaddyfile(proxyUnbuffered)
		if err := reload(ctx, s.UnbufferedProxyAdmin, s.UnbufferedCaddyfile); err != nil {
			return err
		}
	}
	if s.Nginx != nil {
		s.Nginx.Stop()
		s.Nginx = nil
		return s.startNginx()
	}
	return nil
}

// reload loads caddyfile into the Caddy process whose admin endpoint is
// admin.
func reload(ctx context.Context, admin, caddyfile string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, admin+"/load", strings.NewReader(caddyfile))
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
		return fmt.Errorf("reloading the proxy at %s: %s: %s", admin, resp.Status, msg)
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

// processes returns every process the stack started, Redis's last.
func (s *Stack) processes() []*Process {
	var out []*Process
	for _, p := range []*Process{s.Proxy, s.UnbufferedProxy, s.Nginx, s.Simulator, s.GuardrailsStub, s.UpstreamStub} {
		if p != nil {
			out = append(out, p)
		}
	}
	if s.Redis != nil {
		out = append(out, s.Redis.Process)
	}
	return out
}

// Stop stops every process and removes the directory.
func (s *Stack) Stop() {
	for _, p := range s.processes() {
		if s.Redis != nil && p == s.Redis.Process {
			s.Redis.Stop()
			continue
		}
		p.Stop()
	}
	_ = os.RemoveAll(s.Dir)
}

// Alive reports an error if a process of the stack has exited.
func (s *Stack) Alive() error {
	for _, p := range s.processes() {
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

// proxyCaddyfile is the Caddyfile of the Caddy process proxy: each of
// its configurations on its own port, in front of the same upstream. The
// limits are far above the load, so that the checks run on every request
// and never refuse one.
func (s *Stack) proxyCaddyfile(proxy string) string {
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
	breaker := `		breaker {
			failures  5
			open_for  30s
			half_open 1
		}
`
	route := func(extra string) string {
		return `		route {
			pin ` + FirstVersion + ` {
				noul   ` + fmt.Sprint(PinThresholds[evaluation.TypeNoul]) + `
				choice ` + fmt.Sprint(PinThresholds[evaluation.TypeChoice]) + `
				score  ` + fmt.Sprint(PinThresholds[evaluation.TypeScore]) + `
			}
			unpinned human
` + extra + `		}
`
	}
	// Escalated's block takes every second answer; EscalationIdle's
	// escalates nothing a payload asks.
	escalateEvery := "\t\t\tescalate " + FirstVersion + " to " + SecondVersion + " {\n\t\t\t\tnoul   0\n\t\t\t\tchoice 0\n\t\t\t\tscore  0\n\t\t\t}\n"
	escalateNone := "\t\t\tescalate " + FirstVersion + " to " + SecondVersion + " {\n\t\t\t\tquestion bench-never-asked 0\n\t\t\t}\n"
	policies := breaker + route("")
	guardrails := func(extra string) string {
		return fmt.Sprintf(`		guardrails %s {
			api_key bench-guardrails-key
			timeout 2s
%s		}
`, s.guardrailsURL, extra)
	}
	allowance := strings.Replace(limits, "\t\t}\n", "\t\t\tlocal_allowance 2% 100ms\n\t\t}\n", 1)
	exact := strings.Replace(limits, "\t\t}\n", "\t\t\tlocal_allowance off\n\t\t}\n", 1)
	// A million yuan a day at 0.042 yuan per million tokens: never spent.
	budget := strings.Replace(limits, "\t\t}\n", "\t\t\tbudget 1000000 per day\n\t\t}\n", 1)
	// A day: entries stored at a payload's warm-up outlive the run.
	answerCache := "\t\tcache {\n\t\t\tttl 24h\n\t\t\tmax_size 8MiB\n\t\t}\n"
	// A tenth of the routed answers drawn for review on top of those
	// routed to a human, into a stream in the same Redis, kept to its
	// newest 100,000 entries.
	review := "\t\t\tqueue bench:review maxlen 100000\n\t\t\taudit 0.1\n"
	gateway := map[string]string{
		Limits:           redis + limits + policies,
		LimitsExact:      redis + exact + policies,
		LimitsAllowance:  redis + allowance + policies,
		LimitsBudget:     redis + budget + policies,
		LimitsLocal:      limits + policies,
		Guardrails:       redis + limits + policies + guardrails(""),
		GuardrailsCached: redis + limits + policies + guardrails("\t\t\tcache 10m\n"),
		Cached:           redis + limits + policies + answerCache,
		Everything:       redis + budget + breaker + route(review) + guardrails("\t\t\tcache 10m\n") + answerCache,
		Escalated:        redis + limits + breaker + route(escalateEvery),
		EscalationIdle:   redis + limits + breaker + route(escalateNone),
	}
	gateway[LimitsUnbuffered], gateway[LimitsLocalUnbuffered] = gateway[Limits], gateway[LimitsLocal]
	o := s.options
	if proxy == proxyUnbuffered {
		o.UnbufferedLog = true
	}
	var b strings.Builder
	b.WriteString(globalOptions(s.admins[proxy], s.Dir, proxy, o))
	for _, name := range s.configsOf(proxy) {
		fmt.Fprintf(&b, "\n# %s\n:%d {\n\tbind 127.0.0.1\n", name, s.sites[name])
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
