package limits

import (
	"testing"

	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/policy/limits/redisstore"
)

// TestAdaptiveIsTheDefault: with Redis and no local_allowance, an
// organization admitted at a pace against a large limit is paid from
// leases (a script per many admissions), a small limit stays exact at any
// pace, and `local_allowance off` makes every admission exact.
func TestAdaptiveIsTheDefault(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name      string
		cfg       Config
		wantLease bool
	}{
		{"default, large limit", Config{RequestsPerMinute: i64(100_000)}, true},
		{"default, small limit", Config{RequestsPerMinute: i64(300)}, false},
		{"off, large limit", Config{RequestsPerMinute: i64(100_000), LocalAllowance: &LocalAllowance{Mode: AllowanceOff}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.StoreTimeout, tc.cfg.OnStoreError = slow, StoreErrorDeny
			l, _ := newLimiter(t, tc.cfg, nil, false, onRedis(srv.URL()))
			_, leases := l.shared.(*redisstore.Leases)
			if leases != (tc.cfg.LocalAllowance == nil) {
				t.Fatalf("leases %v for local_allowance %+v", leases, tc.cfg.LocalAllowance)
			}
			mustAllow(t, l.Admit(bg, "warm", 1)) // connects and loads the script
			hook := &redistest.CountHook{}
			universal(l).AddHook(hook)
			const n = 100
			for range n {
				mustAllow(t, l.Admit(bg, "acme", 10))
			}
			scripts := hook.Scripts.Load()
			t.Logf("%d scripts for %d admissions", scripts, n)
			switch {
			case tc.wantLease && scripts > redisstore.MinLeaseAdmissions+5:
				t.Fatalf("%d scripts for %d admissions at a pace: want the first %d exact and leases after", scripts, n, redisstore.MinLeaseAdmissions-1)
			case !tc.wantLease && scripts != n:
				t.Fatalf("%d scripts for %d admissions, want one each", scripts, n)
			}
		})
	}
}
