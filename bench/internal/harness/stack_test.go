package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/systemone/systemone-gateway" // the systemone directive and the buffered writer
)

// testStack is a stack that was never started, with a port per
// configuration: enough to write its proxies' configurations.
func testStack() *Stack {
	s := &Stack{
		Dir: "/tmp/bench", Redis: &Redis{Addr: "127.0.0.1:7"}, StubURL: "http://127.0.0.1:8", SimulatorURL: "http://127.0.0.1:9",
		Upstream: UpstreamStub, guardrailsURL: "http://127.0.0.1:10",
		admins: map[string]int{proxyMain: 2019, proxyUnbuffered: 2020}, sites: map[string]int{},
		options: Options{Configs: AllConfigs()},
	}
	for i, c := range s.options.Configs {
		s.sites[c] = 20000 + i
	}
	return s
}

// TestProxyCaddyfiles: each Caddy process serves its own configurations
// only, Caddy adapts both Caddyfiles with the gateway's directives, and E
// has every policy on, in the same Redis.
func TestProxyCaddyfiles(t *testing.T) {
	s := testStack()
	for proxy, want := range map[string][]string{
		proxyMain:       {Plain, Limits, LimitsExact, LimitsBudget, LimitsLocal, LimitsAllowance, Guardrails, GuardrailsCached, Cached, Everything, Escalated, EscalationIdle},
		proxyUnbuffered: {LimitsUnbuffered, LimitsLocalUnbuffered},
	} {
		if got := s.configsOf(proxy); !slices.Equal(got, want) {
			t.Fatalf("%s serves %v, want %v", proxy, got, want)
		}
		caddyfile := s.proxyCaddyfile(proxy)
		for _, c := range AllConfigs() {
			if served := strings.Contains(caddyfile, "\n# "+c+"\n"); served != slices.Contains(want, c) {
				t.Errorf("%s's Caddyfile serves %s: %v", proxy, c, served)
			}
		}
		if buffered := strings.Contains(caddyfile, "output buffered"); buffered != (proxy == proxyMain) {
			t.Errorf("%s's log buffered: %v", proxy, buffered)
		}
		_, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
		if err != nil {
			t.Fatalf("adapting %s's Caddyfile: %v\n%s", proxy, err, caddyfile)
		}
		for _, w := range warnings {
			// Its values are aligned in columns, which caddy fmt undoes.
			if !strings.Contains(w.Message, "not formatted") {
				t.Errorf("adapting %s's Caddyfile: %v", proxy, w)
			}
		}
	}
	// X and Xn are L with an escalate block of the pinned version: X's
	// takes every second answer, Xn's no question a payload asks.
	main := s.proxyCaddyfile(proxyMain)
	site := func(c string) string {
		_, rest, _ := strings.Cut(main, "\n# "+c+"\n")
		site, _, _ := strings.Cut(rest, "\n# ")
		return site
	}
	limits := strings.Replace(site(Limits), fmt.Sprint(s.sites[Limits]), "PORT", 1)
	for c, block := range map[string]string{
		Escalated:      "escalate service-1.0.0 to service-2.0.0 {\n\t\t\t\tnoul   0\n\t\t\t\tchoice 0\n\t\t\t\tscore  0\n\t\t\t}",
		EscalationIdle: "escalate service-1.0.0 to service-2.0.0 {\n\t\t\t\tquestion bench-never-asked 0\n\t\t\t}",
	} {
		got := strings.Replace(site(c), fmt.Sprint(s.sites[c]), "PORT", 1)
		if without := strings.Replace(got, "\t\t\t"+block+"\n", "", 1); without == got || without != limits {
			t.Errorf("%s is not L with %q:\n%s\nL:\n%s", c, block, got, limits)
		}
	}
	_, e, _ := strings.Cut(main, "\n# "+Everything+"\n")
	for _, line := range []string{"redis redis://127.0.0.1:7", "budget 1000000 per day", "breaker {", "guardrails http://127.0.0.1:10 {",
		"cache 10m", "route {", "queue bench:review maxlen 100000", "audit 0.1", "cache {"} {
		if !strings.Contains(e, line) {
			t.Errorf("E lacks %q:\n%s", line, e)
		}
	}
}

// TestUnknownConfigRefused: StartStack names a configuration it does not
// know, before it builds or starts anything.
func TestUnknownConfigRefused(t *testing.T) {
	s, err := StartStack(t.Context(), Options{Configs: []string{Plain, Limits, "Lq"}})
	if err == nil {
		s.Stop()
		t.Fatal("StartStack served an unknown configuration")
	}
	if !strings.Contains(err.Error(), `"Lq"`) {
		t.Fatalf("got %v, want the unknown configuration named", err)
	}
}

// TestNginxConf: N forwards and writes nothing per request, Nl counts every
// request against a per-key limit and logs it through a buffer; nginx
// accepts the configuration when it is installed.
func TestNginxConf(t *testing.T) {
	s := testStack()
	conf := nginxConf("/tmp/bench/nginx", "127.0.0.1:8", map[string]int{Nginx: s.sites[Nginx], NginxLimits: s.sites[NginxLimits]})
	_, nl, ok := strings.Cut(conf, "# "+NginxLimits+"\n")
	n, _, _ := strings.Cut(conf, "# "+NginxLimits+"\n")
	_, n, _ = strings.Cut(n, "# "+Nginx+"\n")
	if !ok || n == "" {
		t.Fatalf("no server for N or Nl:\n%s", conf)
	}
	for _, want := range []string{"master_process off;", "daemon off;", "access_log off;", "limit_req_zone $http_authorization zone=per_key", "keepalive 64;"} {
		if !strings.Contains(conf, want) {
			t.Errorf("nginx.conf lacks %q", want)
		}
	}
	if strings.Contains(n, "limit_req") || strings.Contains(n, "access_log") {
		t.Errorf("N limits or logs:\n%s", n)
	}
	if !strings.Contains(nl, "limit_req zone=per_key") || !strings.Contains(nl, "access_log /tmp/bench/nginx/access.log request buffer=") {
		t.Errorf("Nl neither limits nor logs each request:\n%s", nl)
	}

	bin := NginxPath()
	if bin == "" {
		t.Skip("nginx is not installed: the benchmark skips N and Nl too")
	}
	prefix := t.TempDir()
	path := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(path, []byte(nginxConf(prefix, "127.0.0.1:8", map[string]int{Nginx: 1, NginxLimits: 2})), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-t", "-p", prefix+"/", "-c", path, "-e", "stderr").CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
}

// TestEverythingRequestsDiffer: no two of E's requests in flight at once
// are identical (an identical miss would wait for the first and look
// again), at up to 128 in flight and more.
func TestEverythingRequestsDiffer(t *testing.T) {
	s := testStack()
	s.URLs = map[string]string{Everything: "http://127.0.0.1:1"}
	reqs := s.Requests(Everything, []byte(`{}`), []byte(`{}`))
	seen := make(map[string]bool)
	for _, r := range reqs {
		seen[r.Key] = true
	}
	if len(reqs) < 256 || len(seen) != len(reqs) {
		t.Fatalf("%d requests, %d distinct keys; want at least 256, all distinct", len(reqs), len(seen))
	}
	if got := len(s.Requests(Limits, []byte(`{}`), []byte(`{}`))); got != len(Keys) {
		t.Fatalf("L has %d requests, want one per key", got)
	}
}
