package calibrate_test

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// The documented Caddyfile adapts, with the real modules, to the active
// audit it describes.
func TestDocActiveAuditCaddyfile(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/active-audit.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```caddyfile[^\n]*\n(.*?)```").FindStringSubmatch(string(doc))
	if m == nil {
		t.Fatal("no caddyfile block")
	}
	site := ":8080 {\n" + m[1] + "\treverse_proxy localhost:9\n}\n"
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(site), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapting:\n%s\n%v", site, err)
	}
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes []struct {
						Handle []struct {
							Route struct {
								ActiveAudit map[string]float64 `json:"active_audit"`
								Queue       struct{ Stream string }
							}
						}
					}
				}
			}
		}
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	h := cfg.Apps.HTTP.Servers["srv0"].Routes[0].Handle[0].Route
	if a := h.ActiveAudit; a["max_share"] != 0.1 || a["floor"] != 0.01 || a["from"] != 0.6 || h.Queue.Stream != "review:entries" {
		t.Errorf("adapted route %+v:\n%s", h, out)
	}
}
