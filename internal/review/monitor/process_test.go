package monitor

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// update1 is one observation of an entry with one question.
func update1(p Params, s State, agree bool) (State, bool) {
	if agree {
		return Update(p, s, 1, 1)
	}
	return Update(p, s, 0, 1)
}

// run feeds n observations that agree with probability p and returns the
// observation at which the alarm was raised, or 0 when it never was.
func run(params Params, p float64, n int, rng *rand.Rand) int {
	s := Fresh(params.Target)
	for i := 1; i <= n; i++ {
		var raised bool
		s, raised = update1(params, s, rng.Float64() < p)
		if raised {
			return i
		}
	}
	return 0
}

// Validity: at agreement exactly the target (the boundary of the null,
// where the process is a martingale and alarms most often), the share of
// 1,000 runs of 5,000 labels that ever alarm is at most alpha. Ville's
// inequality bounds the true share by alpha; the simulated share of 1,000
// runs has a standard error of sqrt(0.05*0.95/1000) = 0.0069 at 0.05, so
// the test allows alpha + 3 standard errors (0.0707) for simulation noise:
// a construction whose true rate were 0.08 would fail it with probability
// about 0.9. The seed is fixed, so the run is deterministic.
func TestValidity(t *testing.T) {
	const runs, labels = 1000, 5000
	for _, target := range []float64{0.90, 0.95} {
		params := Params{Target: target, Alpha: 0.05}
		rng := rand.New(rand.NewPCG(19, uint64(target*100)))
		alarms := 0
		for range runs {
			if run(params, target, labels, rng) > 0 {
				alarms++
			}
		}
		share := float64(alarms) / runs
		tolerance := 3 * math.Sqrt(params.Alpha*(1-params.Alpha)/runs)
		t.Logf("target %.2f: %d of %d runs alarmed (%.3f; allowed %.4f)", target, alarms, runs, share, params.Alpha+tolerance)
		if share > params.Alpha+tolerance {
			t.Errorf("target %.2f: %.3f of runs alarmed at agreement = target, want <= alpha %.2f + %.4f", target, share, params.Alpha, tolerance)
		}
	}
}

// The process detects what it is for: at agreement 0.10 below the target
// every run alarms within 5,000 labels, and at agreement above the target
// (0.99) it almost never does.
func TestPowerAndQuiet(t *testing.T) {
	params := Params{Target: 0.9, Alpha: 0.05}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		if run(params, 0.8, 5000, rng) == 0 {
			t.Fatalf("run %d at agreement 0.80 never alarmed", i)
		}
	}
	alarms := 0
	for range 200 {
		if run(params, 0.99, 5000, rng) > 0 {
			alarms++
		}
	}
	if alarms > 0 {
		t.Errorf("%d of 200 runs at agreement 0.99 alarmed", alarms)
	}
}

// Evidence starts at 1, stays nonnegative, agreement lowers the bet to 0,
// and the alarm stays once raised, even when labels agree again.
func TestUpdateShape(t *testing.T) {
	params := Params{Target: 0.9, Alpha: 0.05}
	s := Fresh(0.9)
	if s.Evidence != 1 || s.Labels != 0 {
		t.Fatalf("fresh %+v", s)
	}
	raisedAt := 0
	for i := 1; i <= 60; i++ {
		var raised bool
		s, raised = update1(params, s, false)
		if raised {
			if raisedAt != 0 {
				t.Fatalf("raised twice, at %d and %d", raisedAt, i)
			}
			raisedAt = i
		}
	}
	if raisedAt == 0 || !s.Alarm || s.Labels != 60 || s.Agree != 0 {
		t.Fatalf("60 disagreements: %+v, raised at %d", s, raisedAt)
	}
	for range 2000 {
		s, _ = update1(params, s, true)
		if s.Evidence < 0 || s.Bet < 0 || s.Bet > params.maxBet() {
			t.Fatalf("out of range: %+v", s)
		}
	}
	if !s.Alarm || s.Bet != 0 || s.Agree != 2000 {
		t.Errorf("after agreeing: %+v, want the alarm kept and the bet at 0", s)
	}
	// A state of another target starts afresh but keeps its alarm.
	s2, _ := update1(Params{Target: 0.95, Alpha: 0.05}, s, true)
	if s2.Labels != 1 || s2.Entries != 1 || s2.Target != 0.95 || s2.Sequence != 2 || !s2.Alarm {
		t.Errorf("target change: %+v", s2)
	}
}

func TestEncodeDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	params := Params{Target: 0.93, Alpha: 0.01}
	s := Fresh(params.Target)
	for range 500 {
		s, _ = update1(params, s, rng.Float64() < 0.88)
		got, err := Decode(s.Encode())
		if err != nil || got != s {
			t.Fatalf("round trip of %+v: %+v, %v", s, got, err)
		}
	}
	for _, bad := range []string{"", "0.9 1 1 1 1 0 1 0", "0.9 1 1 1 1 x 0 1 0", "0.9 1 1 1 1 1 0 1 2", "0.9 1 1 1 1 NaN 0 1 0", "0.9 0 1 1 1 1 0 1 0"} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(%q) accepted", bad)
		}
	}
	if err := (Params{Target: 1, Alpha: 0.05}).Validate(); err == nil {
		t.Error("target 1 accepted")
	}
	if err := (Params{Target: 0.9, Alpha: math.NaN()}).Validate(); err == nil {
		t.Error("alpha NaN accepted")
	}
	groups := []Group{{Model: "a:b/c", Type: "noul"}, {Model: "a:b@c", Type: "choice", Org: "acme:x@y z", ByOrg: true}, {Model: "m", Type: "score", ByOrg: true},
		{Model: "e:2^x", Type: "noul", EscalatedFrom: "m:1^@y"}, {Model: "e", Type: "choice", Org: "a^b:c", ByOrg: true, EscalatedFrom: "m"}}
	members := map[string]bool{}
	for _, g := range groups {
		if back, ok := ParseMember(g.Member()); !ok || back != g {
			t.Errorf("member round trip %q: %+v", g.Member(), back)
		}
		members[g.Member()] = true
	}
	// An escalated group and the same version's own answers are apart.
	own := Group{Model: "e", Type: "choice", Org: "a^b:c", ByOrg: true}
	if members[own.Member()] || own.Member() == groups[4].Member() {
		t.Errorf("the escalated group %q and the version's own %q are not apart", groups[4].Member(), own.Member())
	}
	if _, ok := ParseMember("noul^:m"); ok {
		t.Error("an escalated member without its first version accepted")
	}
}

// BenchmarkLabelsToAlarm reports the median number of labels to the
// alarm when the agreement is 0.05 below the target (alpha 0.05), next to
// the least expected number any test can need, log(1/alpha) divided by
// the KL divergence of Bernoulli(target - 0.05) from Bernoulli(target)
// (Wald's bound for the sequential probability ratio test that knows the
// drop in advance). Each iteration simulates 201 runs.
func BenchmarkLabelsToAlarm(b *testing.B) {
	for _, target := range []float64{0.90, 0.95} {
		b.Run(strconvTarget(target), func(b *testing.B) {
			params := Params{Target: target, Alpha: 0.05}
			p := target - 0.05
			rng := rand.New(rand.NewPCG(7, uint64(target*100)))
			var hits []int
			for b.Loop() {
				for range 201 {
					n := run(params, p, 100000, rng)
					if n == 0 {
						n = 100001
					}
					hits = append(hits, n)
				}
			}
			slices.Sort(hits)
			median := float64(hits[len(hits)/2])
			best := math.Log(1/params.Alpha) / kl(p, target)
			b.ReportMetric(median, "median-labels")
			b.ReportMetric(best, "best-labels")
			b.ReportMetric(median/best, "ratio")
		})
	}
}

func strconvTarget(t float64) string {
	return "target=" + string([]byte{'0', '.', byte('0' + int(t*10)%10), byte('0' + int(math.Round(t*100))%10)})
}

// kl is the Kullback-Leibler divergence of Bernoulli(p) from Bernoulli(q).
func kl(p, q float64) float64 {
	return p*math.Log(p/q) + (1-p)*math.Log((1-p)/(1-q))
}

// The oracle figures the docs quote.
func TestKL(t *testing.T) {
	for _, c := range []struct{ target, want float64 }{{0.90, 245}, {0.95, 145}} {
		got := math.Log(20) / kl(c.target-0.05, c.target)
		if math.Abs(got-c.want) > 1 {
			t.Errorf("target %.2f: %.1f labels, want about %.0f", c.target, got, c.want)
		}
	}
}
