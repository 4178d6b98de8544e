package deploy_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/simulator"
)

const scrapeConfigFile = "prometheus/prometheus.yml"

// The shipped scrape config is what Prometheus runs: promtool accepts it
// with its rule file, and a real Prometheus started on it (only the target
// and the intervals changed, for a test) scrapes a real gateway's metrics
// site, the one the docs show, and loads the alerting rules beside it.
func TestScrapeConfig(t *testing.T) {
	promtool := requireTool(t, "promtool")
	prometheus := requireTool(t, "prometheus")
	run(t, "prometheus", promtool, "check", "config", filepath.Base(scrapeConfigFile))

	shipped, err := os.ReadFile(scrapeConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	const documentedTarget = "localhost:9180"
	if !strings.Contains(string(shipped), "- "+documentedTarget+"\n") {
		t.Fatalf("%s does not scrape %s, the metrics site the docs show", scrapeConfigFile, documentedTarget)
	}

	upstreamHandler, err := simulator.New(simulator.Handler{})
	if err != nil {
		t.Fatal(err)
	}
	upstream := gatewaytest.NewUpstream(t, upstreamHandler)
	port, metricsPort := gatewaytest.FreePort(t), gatewaytest.FreePort(t)
	gatewaytest.Load(t, fmt.Sprintf(`:%d {
	systemone {
		limits
	}
	reverse_proxy %s
}
:%d {
	metrics
}
`, port, upstream.Addr(), metricsPort))

	config := strings.NewReplacer(
		documentedTarget, fmt.Sprintf("127.0.0.1:%d", metricsPort),
		"scrape_interval: 15s", "scrape_interval: 1s",
		"evaluation_interval: 15s", "evaluation_interval: 1s",
	).Replace(string(shipped))
	dir := t.TempDir()
	alerts, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(alertsFile)), alerts, 0o600); err != nil {
		t.Fatal(err)
	}
	prom := startPrometheusConfig(t, prometheus, dir, config)
	prom.waitFor(t, "the first scrape of the gateway", `up{job="systemone-gateway"} == 1`, func(float64) bool { return true })

	// The metrics are the process's (Caddy's registry), so other tests'
	// requests may have counted already: one more must show.
	const forwarded = `sum(systemone_requests_total{job="systemone-gateway",outcome="forwarded"}) or vector(0)`
	before, err := prom.query(forwarded)
	if err != nil || len(before) != 1 {
		t.Fatalf("%s: %v %v", forwarded, before, err)
	}
	s := &stack{url: fmt.Sprintf("http://127.0.0.1:%d", port), client: &http.Client{}}
	t.Cleanup(s.client.CloseIdleConnections)
	if a := s.send(t, "POST", "/v1/systemone", "scrape-key", noulBody); a.status != 200 {
		t.Fatalf("evaluation through the gateway: %d %s", a.status, a.body)
	}
	prom.waitFor(t, "the gateway's evaluation, scraped", forwarded, func(v float64) bool { return v == before[0]+1 })
	prom.checkRules(t)
}
