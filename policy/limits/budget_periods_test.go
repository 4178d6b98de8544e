package limits

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/testclock"
)

func TestParseYuan(t *testing.T) {
	for in, want := range map[string]Yuan{"5": 5 * nanoPerYuan, "5.00": 5 * nanoPerYuan, "0.042": 42_000_000, "2.5": 2_500_000_000, ".5": 500_000_000,
		"0.000000001": 1, "1000000": maxBudget} {
		if got, err := ParseYuan(in); err != nil || got != want {
			t.Errorf("ParseYuan(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", ".", "-1", "1e3", "0.0000000001", "1,5", "five", "1234567890"} {
		if _, err := ParseYuan(in); err == nil {
			t.Errorf("ParseYuan(%q) accepted", in)
		}
	}
	for y, want := range map[Yuan]string{5 * nanoPerYuan: "5.00", 42_000_000: "0.042", 2_500_000_000: "2.50", 1: "0.000000001"} {
		if got := y.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int64(y), got, want)
		}
	}
	// Headers print at most 6 decimals, rounded down.
	if got := Yuan(4_999_999_999).format(2, 6); got != "4.999999" {
		t.Errorf("format = %q", got)
	}
	var b Budget
	if err := json.Unmarshal([]byte(`{"yuan": 2.50, "per": "day"}`), &b); err != nil || b.Yuan != 2_500_000_000 {
		t.Errorf("JSON budget %+v %v", b, err)
	}
	if out, _ := json.Marshal(Config{Budget: &Budget{Yuan: 2 * nanoPerYuan, Per: PerDay}, Price: yp(DefaultPrice)}); !strings.Contains(string(out), `"budget":{"yuan":2,"per":"day"},"price":0.042`) {
		t.Errorf("JSON %s", out)
	}
}

func TestBudgetValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Budget: &Budget{Yuan: maxBudget + nanoPerMicro, Per: PerDay}}, "budget 1000000.000001: want 0 to 1000000 yuan"},
		{Config{Budget: &Budget{Yuan: 1, Per: PerDay}}, "budget 0.000000001: at most 6 decimals"},
		{Config{Budget: &Budget{Yuan: nanoPerYuan, Per: "week"}}, `budget 1.00 per "week": want per day or per month`},
		{Config{Price: yp(0)}, "price 0.00: want more than 0 and at most 1000 yuan per million input tokens"},
		{Config{Price: yp(maxPrice + nanoPerMicro)}, "price 1000.000001: want more than 0"},
		{Config{Price: yp(42_000_001)}, "price 0.042000001: at most 6 decimals"},
		{Config{BudgetTimezone: "Mars/Olympus"}, `budget_timezone "Mars/Olympus": not an IANA time zone`},
		{Config{Orgs: map[string]Override{"acme": {Budget: &Budget{Yuan: -1}}}}, `org "acme": budget -0.000000001: want 0 to 1000000 yuan`},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	ok := Config{Budget: &Budget{Yuan: maxBudget, Per: PerMonth}, Price: yp(maxPrice), BudgetTimezone: "Asia/Shanghai",
		Orgs: map[string]Override{"free": {Budget: &Budget{}}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

func TestCost(t *testing.T) {
	for _, tc := range []struct {
		tokens int64
		price  Yuan
		want   int64
	}{
		{1_000_000, DefaultPrice, 42_000_000}, // 0.042 yuan
		{1, DefaultPrice, 42},
		{0, DefaultPrice, 0},
		{-5, DefaultPrice, 0},
		{3, 42_500_000, 128}, // 127.5 rounds up
		{maxCostTokens * 10, maxPrice, int64(maxBudget)},
	} {
		if got := cost(tc.tokens, tc.price); got != tc.want {
			t.Errorf("cost(%d, %s) = %d, want %d", tc.tokens, tc.price, got, tc.want)
		}
	}
}

func TestPeriods(t *testing.T) {
	for _, tc := range []struct {
		name, zone, per, at string // at: RFC 3339
		period, start, end  string
	}{
		{"utc day", "UTC", PerDay, "2026-11-30T23:59:59Z", "2026-11-30", "2026-11-30T00:00:00Z", "2026-12-01T00:00:00Z"},
		{"utc month", "UTC", PerMonth, "2026-11-30T23:59:59Z", "2026-11", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"},
		{"year rollover", "Asia/Shanghai", PerMonth, "2026-12-31T16:00:00Z", "2027-01", "2027-01-01T00:00:00+08:00", "2027-02-01T00:00:00+08:00"},
		{"shanghai day", "Asia/Shanghai", PerDay, "2026-11-30T15:59:59Z", "2026-11-30", "2026-11-30T00:00:00+08:00", "2026-12-01T00:00:00+08:00"},
		{"february", "UTC", PerMonth, "2028-02-29T12:00:00Z", "2028-02", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z"},
		// New York springs forward at 2am on 8 March: a day of 23 hours.
		{"dst short day", "America/New_York", PerDay, "2026-03-08T12:00:00-04:00", "2026-03-08", "2026-03-08T00:00:00-05:00", "2026-03-09T00:00:00-04:00"},
		{"dst long day", "America/New_York", PerDay, "2026-11-01T23:30:00-05:00", "2026-11-01", "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00"},
		// Santiago skips midnight on 6 September (23:59:59 -04 is followed
		// by 01:00 -03): that day begins at the jump.
		{"skipped midnight, before", "America/Santiago", PerDay, "2026-09-05T23:59:59-04:00", "2026-09-05", "2026-09-05T00:00:00-04:00", "2026-09-06T01:00:00-03:00"},
		{"skipped midnight, after", "America/Santiago", PerDay, "2026-09-06T01:00:00-03:00", "2026-09-06", "2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"},
		{"skipped midnight, in the hour before", "America/Santiago", PerDay, "2026-09-05T23:30:00-04:00", "2026-09-05", "2026-09-05T00:00:00-04:00", "2026-09-06T01:00:00-03:00"},
		{"skipped midnight, month", "America/Havana", PerMonth, "2026-03-20T12:00:00-04:00", "2026-03", "2026-03-01T00:00:00-05:00", "2026-04-01T00:00:00-04:00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at, err := time.Parse(time.RFC3339, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			loc := zone(t, tc.zone)
			p := periodOf(at, tc.per, loc)
			if p.Name != tc.period || p.Start.Format(time.RFC3339) != tc.start || p.End.Format(time.RFC3339) != tc.end {
				t.Fatalf("period %s [%s, %s), want %s [%s, %s)", p.Name, p.Start.Format(time.RFC3339), p.End.Format(time.RFC3339), tc.period, tc.start, tc.end)
			}
			ps := periodsAround(at, tc.per, loc)
			if !ps[0].End.Equal(ps[1].Start) || !ps[1].End.Equal(ps[2].Start) || ps[0].Name >= ps[1].Name || ps[1].Name >= ps[2].Name {
				t.Fatalf("neighbours %+v", ps)
			}
		})
	}
	// Every instant of two DST years belongs to exactly the period whose
	// bounds hold it, and consecutive periods meet.
	for _, name := range []string{"America/Santiago", "America/Havana", "Asia/Beirut", "Europe/London", "Australia/Lord_Howe"} {
		loc := zone(t, name)
		for _, per := range budgetPeriods {
			prev := periodOf(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), per, loc)
			for at := prev.End; at.Year() < 2028; {
				p := periodOf(at, per, loc)
				if !p.Start.Equal(prev.End) || !p.End.After(p.Start) || p.Name <= prev.Name {
					t.Fatalf("%s %s: %+v after %+v", name, per, p, prev)
				}
				for _, probe := range []time.Time{p.Start, p.End.Add(-time.Nanosecond), p.Start.Add(p.End.Sub(p.Start) / 2)} {
					if q := periodOf(probe, per, loc); q.Name != p.Name {
						t.Fatalf("%s %s: %s is in %s, want %s", name, per, probe, q.Name, p.Name)
					}
				}
				prev, at = p, p.End
			}
		}
	}
}

func TestBudget(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		l, clk := mk(budgetConfig(PerDay, ""))
		clk.Set(time.Date(2026, 11, 23, 18, 0, 30, 0, time.UTC))
		const msg = "Budget exceeded: 0.01 yuan per day for organization acme, resets at 2026-11-24T00:00:00Z"
		var admitted []Decision
		for i := range 5 { // 2,000 tokens reserve 0.002 yuan each
			d := mustAllow(t, l.Admit(bg, "acme", 2000))
			mustSpend(t, d, 0, Yuan(2_000_000*(i+1)), 2_000_000)
			admitted = append(admitted, d)
		}
		d := l.Admit(bg, "acme", 1)
		mustRefuseBudget(t, d, msg)
		mustSpend(t, d, 0, 10_000_000, 0)
		if d.RetryAfter != 6*time.Hour-30*time.Second {
			t.Errorf("retry after %s", d.RetryAfter)
		}
		h := http.Header{}
		d.SetHeaders(h)
		if h.Get("X-Budget-Limit") != "0.01" || h.Get("X-Budget-Remaining") != "0.00" || h.Get("X-Budget-Reset") != "2026-11-24T00:00:00Z" {
			t.Errorf("402 headers %v", h)
		}
		// A 200 charges its real cost and releases the reservation.
		settle(l, admitted[0], 1000)
		d = mustAllow(t, l.Admit(bg, "acme", 1000))
		mustSpend(t, d, 1_000_000, 9_000_000, 1_000_000)
		// After its own charge of 400 tokens: 0.01 - 0.001 - 0.008 - 0.0004.
		if left, ok := d.Budget.Remaining(d.Cost(400)); !ok || left != 600_000 {
			t.Errorf("remaining after the charge: %d %v", left, ok)
		}
		h = http.Header{}
		d.Budget.SetHeaders(h, d.Cost(400))
		if h.Get("X-Budget-Remaining") != "0.0006" {
			t.Errorf("200 headers %v", h)
		}
		mustRefuseBudget(t, l.Admit(bg, "acme", 1), msg)
		// Failures release their reservations and cost nothing.
		for _, d := range admitted[1:] {
			settle(l, d, 0)
		}
		settle(l, d, 400)
		d = mustAllow(t, l.Admit(bg, "acme", 0))
		mustSpend(t, d, 1_400_000, 0, 0)
		// Only settled costs count: spend up to the budget and past it by
		// at most the last request admitted.
		d = mustAllow(t, l.Admit(bg, "acme", 100))
		settle(l, d, 20_000) // under-estimated: 0.02 yuan
		d = l.Admit(bg, "acme", 1)
		mustRefuseBudget(t, d, msg)
		mustSpend(t, d, 21_400_000, 0, 0)
		if left, ok := d.Budget.Remaining(0); !ok || left != 0 {
			t.Errorf("remaining past the budget: %d", left)
		}
		// Another org, another budget; the next day, a fresh one.
		mustAllow(t, l.Admit(bg, "other", 1))
		clk.Set(time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC))
		d = mustAllow(t, l.Admit(bg, "acme", 1))
		mustSpend(t, d, 0, 1000, 1000)
		if d.Budget.Reset.Format(time.RFC3339) != "2026-11-25T00:00:00Z" {
			t.Errorf("reset %s", d.Budget.Reset)
		}
	})
}

// A request just before and just after midnight in a zone with DST, and
// across a month's end.
func TestBudgetPeriodBoundaries(t *testing.T) {
	for _, tc := range []struct {
		name, zone, per  string
		before           time.Time // a second before the boundary
		reset, nextReset string
	}{
		{"dst day", "America/New_York", PerDay, time.Date(2026, 3, 7, 23, 59, 59, 0, zone(t, "America/New_York")),
			"2026-03-08T00:00:00-05:00", "2026-03-09T00:00:00-04:00"},
		{"skipped midnight", "America/Santiago", PerDay, time.Date(2026, 9, 5, 23, 59, 59, 0, zone(t, "America/Santiago")),
			"2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"},
		{"month", "Asia/Shanghai", PerMonth, time.Date(2026, 11, 30, 23, 59, 59, 0, zone(t, "Asia/Shanghai")),
			"2026-12-01T00:00:00+08:00", "2027-01-01T00:00:00+08:00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
				l, clk := mk(budgetConfig(tc.per, tc.zone))
				clk.Set(tc.before.Add(-time.Minute))
				settle(l, mustAllow(t, l.Admit(bg, "acme", 1000)), 10_000) // the whole budget
				clk.Set(tc.before)
				d := l.Admit(bg, "acme", 1)
				mustRefuseBudget(t, d, "Budget exceeded: 0.01 yuan per "+tc.per+" for organization acme, resets at "+tc.reset)
				if d.RetryAfter != time.Second {
					t.Errorf("retry after %s", d.RetryAfter)
				}
				clk.Advance(2 * time.Second)
				d = mustAllow(t, l.Admit(bg, "acme", 1))
				mustSpend(t, d, 0, 1000, 1000)
				h := http.Header{}
				d.SetHeaders(h)
				if h.Get("X-Budget-Reset") != tc.nextReset || h.Get("X-Budget-Remaining") != "0.01" {
					t.Errorf("headers after the boundary %v, want reset %s", h, tc.nextReset)
				}
				// A request admitted before the boundary settles in its
				// own period, not in the new one.
				clk.Set(tc.before)
				late := mustAllow(t, l.Admit(bg, "late", 1000))
				clk.Advance(2 * time.Second)
				settle(l, late, 10_000)
				mustSpend(t, mustAllow(t, l.Admit(bg, "late", 0)), 0, 0, 0)
			})
		})
	}
}
