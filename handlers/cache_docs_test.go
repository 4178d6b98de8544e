package handlers_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
)

var fencedCaddyfile = regexp.MustCompile("(?s)```caddyfile\n(.*?)```")

// Every Caddyfile docs/cache.md shows runs: each is served as written
// (the site's port, the upstream and the Redis URL swapped for the test's)
// in front of the simulator, and answers a repeated request from the cache.
func TestCacheDocsConfigs(t *testing.T) {
	doc, err := os.ReadFile("../docs/cache.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := fencedCaddyfile.FindAllStringSubmatch(string(doc), -1)
	if len(blocks) != 2 {
		t.Fatalf("%d Caddyfile blocks in docs/cache.md, want the 2 this test knows", len(blocks))
	}
	sim := unlimitedSimulator(t)
	rs := redistest.Start(t)
	for i, block := range blocks {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			port := gatewaytest.FreePort(t)
			sites := strings.NewReplacer(":8080 {", fmt.Sprintf(":%d {", port), "localhost:9080", sim.Addr(),
				"redis://localhost:6379", rs.URL()).Replace(block[1])
			if sites == block[1] {
				t.Fatal("nothing to swap")
			}
			gatewaytest.Load(t, sites)
			url := fmt.Sprintf("http://127.0.0.1:%d", port)
			body := versionBody(fmt.Sprintf("docs block %d", i))
			if resp, b := post(t, url, "docs-key", body); resp.StatusCode != 200 || resp.Header.Get("X-Cache") != "miss" {
				t.Fatalf("first: %d X-Cache %q: %s", resp.StatusCode, resp.Header.Get("X-Cache"), b)
			}
			hitWithin(t, url, "docs-key", body, 5e9)
		})
	}
}
