package limits

// Bucket arithmetic, shared by the in-process store and (transliterated) by
// the Redis script, so both stores decide alike to the unit.
//
// Levels are integers in units: one request or one token is `unit` units.
// With unit = 60,000,000 both refill rates are whole units per microsecond (a
// requests bucket of n per minute refills n units/µs, a token bucket of n per
// second 60n units/µs), so refill is exact integer arithmetic. With numbers
// capped at maxLimit every level, capacity and quotient stays below 2^52, which
// the script's Lua doubles also represent exactly.
const unit = 60_000_000

// spec is one bucket of one organization. A zero capacity turns it off.
type spec struct {
	capacity int64 // units
	rate     int64 // units per microsecond
}

func (s spec) on() bool { return s.capacity > 0 }

func (l orgLimits) requests() spec {
	if l.rpm == 0 {
		return spec{}
	}
	return spec{capacity: l.rpm * unit, rate: l.rpm}
}

func (l orgLimits) tokens() spec {
	if l.tps == 0 {
		return spec{}
	}
	return spec{capacity: l.burst * unit, rate: l.tps * 60}
}

// stored is a bucket as a store last wrote it. A bucket never written, or
// forgotten because it was full, is full.
type stored struct {
	level int64 // units; negative is debt, floored at -capacity
	at    int64 // microseconds
	known bool
}

// refill returns the level of s at now.
func refill(s spec, b stored, now int64) int64 {
	if !b.known || b.level >= s.capacity {
		return s.capacity // also clamps a capacity lowered by a reload
	}
	if now <= b.at {
		return b.level // clocks going backwards never refill
	}
	elapsed := now - b.at
	if elapsed >= ceilDiv(s.capacity-b.level, s.rate) {
		return s.capacity
	}
	return b.level + elapsed*s.rate
}

// waitFor returns the microseconds until a bucket at level can pay cost.
func waitFor(s spec, level, cost int64) int64 {
	if level >= cost {
		return 0
	}
	return ceilDiv(cost-level, s.rate)
}

// fullIn returns the microseconds until a bucket at level is full again:
// from then on forgetting it changes nothing.
func fullIn(s spec, level int64) int64 {
	if !s.on() || level >= s.capacity {
		return 0
	}
	return ceilDiv(s.capacity-level, s.rate)
}

// settled returns level after charging delta units (a refund when negative),
// kept between one bucket of debt and a full bucket: a refund never lifts a
// bucket above capacity, and a large under-estimate delays an organization by
// at most two bucket refills rather than indefinitely.
func settled(s spec, level, delta int64) int64 {
	return min(max(level-delta, -s.capacity), s.capacity)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// check is one admission: what it costs and what it consults.
type check struct {
	req, tok         spec
	reqCost, tokCost int64 // units; negative: the bucket is not consulted
	hold             bool  // an upstream hold refuses it
	reportTok        bool  // the Decision reports the token bucket even unconsulted
	budget           budgetCheck
}

func (c check) usesReq() bool { return c.req.on() && c.reqCost >= 0 }
func (c check) usesTok() bool { return c.tok.on() && c.tokCost >= 0 }

// outcome is a store's answer to a check.
type outcome struct {
	allowed  bool
	req, tok int64 // levels after the debit (units), 0 for a bucket off
	// Microseconds until the requests bucket, the token bucket and the hold
	// would let the check pass; 0 where nothing waits.
	reqWait, tokWait, holdWait int64
	// The budget, when one applies: which of the check's periods the store
	// is in (0 to 2), what it found spent and reserved (this admission's
	// reservation included), the minute its reservation is filed under,
	// and whether the budget refused the request (which then still counts
	// its one request, unless reqWait says the requests bucket could not).
	period          int
	spent, reserved int64
	slot            int64
	budgetRefused   bool
	// lease, when not 0, names the lease (local_allowance) that paid the
	// admission's tokens: its settlement is corrected against it first.
	lease uint64
}
