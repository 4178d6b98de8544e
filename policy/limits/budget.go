package limits

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/systemone/systemone-gateway/internal/headerset"
	"github.com/systemone/systemone-gateway/policy/limits/store"
)

// Budgets are money, kept exactly: every amount (a budget, a price, what an
// organization spent or reserved) is an integer number of nano-yuan, in
// process and in Redis. With amounts bounded by maxBudget and the cost of one
// request by maxCostTokens x maxPrice, every sum stays below 2^53, which the
// Redis scripts' Lua doubles also represent exactly.

// Yuan is an amount of money, held exactly as an integer number of
// nano-yuan (10^-9 yuan). In JSON and in the Caddyfile it is written as a
// decimal number of yuan, such as 5, 2.50 or 0.042.
type Yuan int64

const (
	nanoPerYuan = 1_000_000_000
	// nanoPerMicro: configured amounts have at most 6 decimals, whole
	// micro-yuan, and headers print at most 6 decimals.
	nanoPerMicro = 1_000
)

// ParseYuan reads a decimal number of yuan (digits, an optional point and
// at most 9 decimals; no sign, no exponent).
func ParseYuan(s string) (Yuan, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || len(frac) > 9 || len(whole) > 9 || !digits(whole) || !digits(frac) {
		return 0, fmt.Errorf("%q is not an amount in yuan (such as 5, 2.50 or 0.042)", s)
	}
	var n int64
	for _, c := range whole + frac + strings.Repeat("0", 9-len(frac)) {
		n = n*10 + int64(c-'0')
	}
	return Yuan(n), nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String writes y in yuan with as many decimals as it needs (at least 2,
// as money is written): 5.00, 0.042.
func (y Yuan) String() string { return y.format(2, 9) }

// format writes y with at least lo and at most hi decimals, rounding down
// (an amount left is never overstated).
func (y Yuan) format(lo, hi int) string {
	sign := ""
	if y < 0 {
		sign, y = "-", -y
	}
	frac := fmt.Sprintf("%09d", int64(y)%nanoPerYuan)[:hi]
	frac = strings.TrimRight(frac, "0")
	if len(frac) < lo {
		frac += strings.Repeat("0", lo-len(frac))
	}
	s := sign + strconv.FormatInt(int64(y)/nanoPerYuan, 10)
	if frac != "" {
		s += "." + frac
	}
	return s
}

// MarshalJSON writes y as a JSON number of yuan.
func (y Yuan) MarshalJSON() ([]byte, error) { return []byte(y.format(0, 9)), nil }

// UnmarshalJSON reads a JSON number (or string) of yuan, exactly; null
// leaves y as it is.
func (y *Yuan) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	v, err := ParseYuan(strings.Trim(string(b), `"`))
	if err != nil {
		return err
	}
	*y = v
	return nil
}

// Budget is a spend cap per calendar period.
type Budget struct {
	// Yuan is what an organization may spend per period, at most 6
	// decimals, at most 1,000,000; 0 turns the budget off (in an org
	// override: this organization has none).
	Yuan Yuan `json:"yuan"`
	// Per is the period: "day" or "month", beginning at midnight in
	// budget_timezone.
	Per string `json:"per,omitempty"`
}

// Budget periods, as Budget.Per names them.
const (
	PerDay   = "day"
	PerMonth = "month"
)

// budgetPeriods are the values of Budget.Per.
var budgetPeriods = []string{PerDay, PerMonth}

// Bounds and defaults of budgets.
const (
	// DefaultPrice is the upstream's: 0.042 yuan per million input tokens.
	DefaultPrice Yuan = 42_000_000
	// maxBudget is a million yuan (10^15 nano-yuan).
	maxBudget Yuan = 1_000_000 * nanoPerYuan
	// maxPrice is 1,000 yuan per million tokens, some 24,000 times the
	// upstream's.
	maxPrice Yuan = 1_000 * nanoPerYuan
	// maxCostTokens bounds the tokens one request is charged or reserved
	// for (the upstream refuses more than 64k): a usage the upstream
	// misreports cannot overflow the sums.
	maxCostTokens = 1_000_000_000
)

func (b Budget) validate() error {
	switch {
	case b.Yuan < 0 || b.Yuan > maxBudget:
		return fmt.Errorf("budget %s: want 0 to %s yuan", b.Yuan, maxBudget.format(0, 0))
	case b.Yuan%nanoPerMicro != 0:
		return fmt.Errorf("budget %s: at most 6 decimals", b.Yuan)
	case (b.Yuan > 0 || b.Per != "") && !slices.Contains(budgetPeriods, b.Per):
		return fmt.Errorf("budget %s per %q: want per day or per month", b.Yuan, b.Per)
	}
	return nil
}

func checkPrice(p Yuan) error {
	switch {
	case p <= 0 || p > maxPrice:
		return fmt.Errorf("price %s: want more than 0 and at most %s yuan per million input tokens", p, maxPrice.format(0, 0))
	case p%nanoPerMicro != 0:
		return fmt.Errorf("price %s: at most 6 decimals", p)
	}
	return nil
}

// loadZone reads an IANA zone name ("" is UTC).
func loadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil || name == "Local" {
		return nil, fmt.Errorf("budget_timezone %q: not an IANA time zone (such as UTC or Asia/Shanghai)", name)
	}
	return loc, nil
}

// cost is what tokens cost at price (per million tokens), rounded up to a
// whole nano-yuan: exact for prices with at most 3 decimals (0.042 yuan per
// million is 42 nano-yuan a token).
func cost(tokens int64, price Yuan) int64 {
	tokens = min(max(tokens, 0), maxCostTokens)
	micro := int64(price) / nanoPerMicro // micro-yuan per million tokens
	return store.CeilDiv(tokens*micro, 1000)
}

// dayStart is the first instant of a calendar date in loc: midnight, or
// when a DST change skips midnight (America/Santiago, America/Havana), the
// instant the clocks jump forward.
func dayStart(y int, m time.Month, d int, loc *time.Location) time.Time {
	y, m, d = time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Date() // the 32nd is the 1st
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if ty, tm, td := t.Date(); ty != y || tm != m || td != d {
		// time.Date resolved the missing midnight to the previous
		// day's last hour: the day begins where that zone period ends.
		if _, end := t.ZoneBounds(); !end.IsZero() {
			t = end
		}
	}
	return t
}

// periodOf returns the day or month of loc that holds t.
func periodOf(t time.Time, per string, loc *time.Location) store.Period {
	lt := t.In(loc)
	y, m, d := lt.Date()
	mk := func(y int, m time.Month, d int) store.Period {
		y, m, d = time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Date() // the 32nd is the 1st
		if per == PerMonth {
			return store.Period{Name: fmt.Sprintf("%04d-%02d", y, m), Start: dayStart(y, m, 1, loc), End: dayStart(y, m+1, 1, loc)}
		}
		return store.Period{Name: fmt.Sprintf("%04d-%02d-%02d", y, m, d), Start: dayStart(y, m, d, loc), End: dayStart(y, m, d+1, loc)}
	}
	if per == PerMonth {
		d = 1
	}
	p := mk(y, m, d)
	// Around a skipped midnight the wall date and the period disagree
	// for up to an hour: step to the period that holds t.
	for range 2 {
		switch {
		case t.Before(p.Start):
			if per == PerMonth {
				p = mk(y, m-1, 1)
			} else {
				p = mk(y, m, d-1)
			}
		case !t.Before(p.End):
			if per == PerMonth {
				p = mk(y, m+1, 1)
			} else {
				p = mk(y, m, d+1)
			}
		default:
			return p
		}
		y, m, d = p.Start.In(loc).Date()
		if per == PerMonth {
			d = 1
		}
	}
	return p
}

// periods are the period that holds an instant and its neighbours
// (previous, current, next), as store.BudgetCheck carries them.
type periods = [3]store.Period

func periodsAround(t time.Time, per string, loc *time.Location) periods {
	cur := periodOf(t, per, loc)
	return periods{periodOf(cur.Start.Add(-time.Nanosecond), per, loc), cur, periodOf(cur.End, per, loc)}
}

// periodCache keeps the periods around the latest instant asked, one per
// kind of period: they change at most once a day.
type periodCache struct {
	loc        *time.Location
	day, month atomic.Pointer[periods]
}

func (c *periodCache) around(t time.Time, per string) periods {
	slot := &c.day
	if per == PerMonth {
		slot = &c.month
	}
	if p := slot.Load(); p != nil && !t.Before(p[1].Start) && t.Before(p[1].End) {
		return *p
	}
	p := periodsAround(t, per, c.loc)
	slot.Store(&p)
	return p
}

// Spend reports an organization's budget after an admission.
type Spend struct {
	// Limit is the period's budget; 0 when no budget applies to the
	// organization (then nothing else is set).
	Limit Yuan
	// Per is "day" or "month".
	Per string
	// Reset is when the period ends, in budget_timezone: the next
	// midnight, or the first of the next month.
	Reset time.Time
	// Spent is what the organization spent in the period, and Reserved
	// what the admitted requests still in flight hold (this one's
	// included), both as the admission found them; -1 when unknown
	// (Redis failed with on_store_error allow or deny).
	Spent, Reserved Yuan
	// Own is this request's reservation: its estimated cost.
	Own Yuan
}

// Remaining is the budget left once this request has cost charge and its
// own reservation is released: the limit less spent and reserved, never
// below 0. ok is false when no budget applies or the amounts are unknown.
func (s Spend) Remaining(charge Yuan) (left Yuan, ok bool) {
	if s.Limit == 0 || s.Spent < 0 {
		return 0, false
	}
	return max(s.Limit-s.Spent-(s.Reserved-s.Own)-charge, 0), true
}

// Budget headers, on every evaluation response of an organization a
// budget applies to.
const (
	HeaderBudgetLimit     = "X-Budget-Limit"
	HeaderBudgetRemaining = "X-Budget-Remaining"
	HeaderBudgetReset     = "X-Budget-Reset"
)

// SetHeaders sets the X-Budget-* headers on h for an answer whose request
// cost charge (0 for any answer but a 200): amounts in yuan with at most 6
// decimals, the reset in RFC 3339. It sets none when no budget applies, and
// omits X-Budget-Remaining when it is unknown.
func (s Spend) SetHeaders(h http.Header, charge Yuan) {
	var set headerset.Set
	s.AddHeaders(&set, charge)
	set.WriteTo(h)
}

// AddHeaders adds what SetHeaders sets to set.
func (s Spend) AddHeaders(set *headerset.Set, charge Yuan) {
	if s.Limit == 0 {
		return
	}
	set.Add(HeaderBudgetLimit, s.Limit.format(2, 6))
	if left, ok := s.Remaining(charge); ok {
		set.Add(HeaderBudgetRemaining, left.format(2, 6))
	} else {
		set.Del(HeaderBudgetRemaining)
	}
	var buf [len(time.RFC3339) + 8]byte
	set.AddBytes(HeaderBudgetReset, s.Reset.AppendFormat(buf[:0], time.RFC3339))
}

// Float is y in yuan, for logs and metrics.
func (y Yuan) Float() float64 { return float64(y) / nanoPerYuan }

// Truncate6 is y rounded down to 6 decimals, as the headers print it.
func (y Yuan) Truncate6() Yuan { return y - y%nanoPerMicro }

func budgetMessage(lim orgLimits, org string, reset time.Time) string {
	return "Budget exceeded: " + lim.budget.format(2, 6) + " yuan per " + lim.per + " for organization " + org +
		", resets at " + reset.Format(time.RFC3339)
}
