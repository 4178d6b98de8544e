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
		{"redis in limits", Config{Redis: []string{"redis://127.0.0.1:6390"}}, "redis moved from the limits block to the systemone block"},
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

func TestRefill(t *testing.T) {
	s := spec{capacity: 10 * unit, rate: 10} // 10 per minute
	const minute = int64(60_000_000)
	for _, tc := range []struct {
		name string
		b    stored
		now  int64
		want int64
	}{
		{"never seen is full", stored{}, 5, 10 * unit},
		{"no time, no refill", stored{level: 3 * unit, at: 100, known: true}, 100, 3 * unit},
		{"clock backwards", stored{level: 3 * unit, at: 100, known: true}, 50, 3 * unit},
		{"one request per 6s", stored{level: 3 * unit, at: 0, known: true}, minute / 10, 4 * unit},
		{"partial", stored{level: 0, at: 0, known: true}, 1, 10},
		{"exactly full", stored{level: 0, at: 0, known: true}, minute, 10 * unit},
		{"capped at capacity", stored{level: 0, at: 0, known: true}, 100 * minute, 10 * unit},
		{"capacity lowered", stored{level: 20 * unit, at: 0, known: true}, 0, 10 * unit},
		{"debt repaid", stored{level: -10 * unit, at: 0, known: true}, minute, 0},
	} {
		if got := refill(s, tc.b, tc.now); got != tc.want {
			t.Errorf("%s: refill = %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := waitFor(s, 0, unit); got != minute/10 {
		t.Errorf("waitFor one request = %dµs, want %d", got, minute/10)
	}
	if got := waitFor(s, unit-1, unit); got != 1 {
		t.Errorf("waitFor one unit = %dµs, want 1 (rounded up)", got)
	}
	if got := settled(s, 9*unit, -5*unit); got != 10*unit {
		t.Errorf("refund above capacity: %d, want %d", got, 10*unit)
	}
	if got := settled(s, 0, 50*unit); got != -10*unit {
		t.Errorf("debt floor: %d, want %d", got, -10*unit)
	}
}

func TestKeyOrg(t *testing.T) {
	for org, want := range map[string]string{
		"acme":           "acme",
		"ünïcode":        "ünïcode",
		"":               "%e",
		"a{b}c":          "a%7Bb%7Dc",
		"50%":            "50%25",
		"two words\r\n":  "two%20words%0D%0A",
		"a%7Bb%7Dc":      "a%257Bb%257Dc",
		"sha256:abcdef0": "sha256:abcdef0",
	} {
		if got := keyOrg(org); got != want {
			t.Errorf("keyOrg(%q) = %q, want %q", org, got, want)
		}
	}
	long := strings.Repeat("x", 500)
	if got := keyOrg(long); !strings.HasPrefix(got, "%h") || len(got) != 34 || got == keyOrg(long+"y") {
		t.Errorf("keyOrg(long) = %q, want a distinct %%h hash", got)
	}
	s := &redisStore{prefix: "p:"}
	b, h := s.keys("a}b{c")
	if b != "p:{a%7Db%7Bc}:b" || h != "p:{a%7Db%7Bc}:h" {
		t.Errorf("keys = %q %q", b, h)
	}
}
