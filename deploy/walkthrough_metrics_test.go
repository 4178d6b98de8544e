package deploy_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// The walk-through's Caddyfile serves the metrics where the shipped
// scrape config looks for them (localhost:9180), with Caddy's metrics
// handler: Prometheus on prometheus.yml scrapes the walk-through as it is.
func TestWalkthroughServesTheScrapedMetrics(t *testing.T) {
	shipped, err := os.ReadFile(scrapeConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(shipped), "- localhost:9180\n") {
		t.Fatalf("%s does not scrape localhost:9180", scrapeConfigFile)
	}
	const example = "examples/review-loop/Caddyfile"
	text, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	// The file's own name, so that its import of pins.caddy is read
	// beside it.
	adapted, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt(text, map[string]any{"filename": example})
	if err != nil {
		t.Fatalf("adapt: %v %v", err, warnings)
	}
	var config struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Listen []string `json:"listen"`
					Routes []struct {
						Handle []struct {
							Handler string `json:"handler"`
						} `json:"handle"`
					} `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(adapted, &config); err != nil {
		t.Fatal(err)
	}
	for _, srv := range config.Apps.HTTP.Servers {
		if !slices.ContainsFunc(srv.Listen, func(l string) bool { return l == "127.0.0.1:9180" || l == ":9180" }) {
			continue
		}
		for _, r := range srv.Routes {
			for _, h := range r.Handle {
				if h.Handler == "metrics" {
					return
				}
			}
		}
	}
	t.Errorf("the walk-through's Caddyfile serves no metrics on :9180:\n%s", adapted)
}
