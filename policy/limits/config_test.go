package limits

import (
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string // "" for valid
	}{
		{"empty uses defaults", Config{}, ""},
		{"every mode", Config{OnStoreError: "deny", StoreTimeout: caddy.Duration(time.Second)}, ""},
		{"buckets off", Config{RequestsPerMinute: i64(0), TokensPerSecond: i64(0), TokenBurst: i64(0)}, ""},
		{"unknown mode", Config{OnStoreError: "fail"}, `on_store_error "fail"`},
		{"negative timeout", Config{StoreTimeout: -1}, "store_timeout"},
		{"negative rpm", Config{RequestsPerMinute: i64(-1)}, "requests_per_minute -1"},
		{"huge burst", Config{TokenBurst: i64(maxLimit + 1)}, "token_burst 10000001"},
		{"burst 0", Config{TokenBurst: i64(0)}, "token_burst 0"},
		{"org burst 0", Config{Orgs: map[string]Override{"acme": {TokenBurst: i64(0)}}}, `org "acme": token_burst 0`},
		{"org negative tps", Config{Orgs: map[string]Override{"acme": {TokensPerSecond: i64(-5)}}}, `org "acme": tokens_per_second -5`},
		{"org overriding nothing", Config{Orgs: map[string]Override{"acme": {}}}, `org "acme" overrides nothing`},
		{"budget of an unknown period", Config{Budget: &Budget{Yuan: 5 * nanoPerYuan, Per: "week"}}, `budget 5.00 per "week": want per day or per month`},
		{"budget 0 of an unknown period", Config{Budget: &Budget{Per: "week"}}, `budget 0.00 per "week": want per day or per month`},
		{"budget without a period", Config{Budget: &Budget{Yuan: 5 * nanoPerYuan}}, `budget 5.00 per "": want per day or per month`},
		{"budget 0 without a period", Config{Orgs: map[string]Override{"acme": {Budget: &Budget{}}}}, ""},
		{"allowance off", Config{LocalAllowance: &LocalAllowance{Mode: AllowanceOff}}, ""},
		{"allowance adaptive, tuned", Config{LocalAllowance: &LocalAllowance{Mode: AllowanceAdaptive, Share: pct(0.05), Interval: caddy.Duration(time.Second)}}, ""},
		{"allowance off with a share", Config{LocalAllowance: &LocalAllowance{Mode: AllowanceOff, Share: pct(0.05)}}, "local_allowance off takes no share or interval"},
		{"allowance of an unknown mode", Config{LocalAllowance: &LocalAllowance{Mode: "sometimes"}}, `local_allowance mode "sometimes": want always, adaptive or off`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.err == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.err)
			}
			if _, err := New(tc.cfg, nil, "p:", nil); err == nil {
				t.Fatal("New accepted an invalid config")
			}
		})
	}
}
