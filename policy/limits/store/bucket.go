package store

// Bucket arithmetic, shared by the in-process store and (transliterated) by
// the Redis scripts, so both stores decide alike to the unit.
//
// Levels are integers in units: one request or one token is Unit units.
// With Unit = 60,000,000 both refill rates are whole units per microsecond (a
// requests bucket of n per minute refills n units/µs, a token bucket of n per
// second 60n units/µs), so refill is exact integer arithmetic. With numbers
// capped at 10,000,000 (the Limiter's bound) every level, capacity and
// quotient stays below 2^52, which the scripts' Lua doubles also represent
// exactly.
const Unit = 60_000_000

// Spec is one bucket of one organization. A zero capacity turns it off.
type Spec struct {
	Capacity int64 // units
	Rate     int64 // units per microsecond
}

// RequestsPerMinute is the requests bucket of n requests per minute (off
// for 0).
func RequestsPerMinute(n int64) Spec {
	if n == 0 {
		return Spec{}
	}
	return Spec{Capacity: n * Unit, Rate: n}
}

// TokensPerSecond is the token bucket of burst tokens refilled at n per
// second (off for n = 0).
func TokensPerSecond(n, burst int64) Spec {
	if n == 0 {
		return Spec{}
	}
	return Spec{Capacity: burst * Unit, Rate: n * 60}
}

// On reports whether the bucket is on.
func (s Spec) On() bool { return s.Capacity > 0 }

// Clamp bounds a charge of tokens to what can change the bucket (from full
// to the debt floor, or back), which also keeps tokens*Unit from
// overflowing.
func (s Spec) Clamp(tokens int64) int64 {
	n := 2 * (s.Capacity / Unit)
	return min(max(tokens, -n), n)
}

// Stored is a bucket as a store last wrote it. A bucket never written, or
// forgotten because it was full, is full.
type Stored struct {
	Level int64 // units; negative is debt, floored at -capacity
	At    int64 // microseconds
	Known bool
}

// Refill returns the level of b at now.
func Refill(s Spec, b Stored, now int64) int64 {
	if !b.Known || b.Level >= s.Capacity {
		return s.Capacity // also clamps a capacity lowered by a reload
	}
	if now <= b.At {
		return b.Level // clocks going backwards never refill
	}
	elapsed := now - b.At
	if elapsed >= CeilDiv(s.Capacity-b.Level, s.Rate) {
		return s.Capacity
	}
	return b.Level + elapsed*s.Rate
}

// WaitFor returns the microseconds until a bucket at level can pay cost.
func WaitFor(s Spec, level, cost int64) int64 {
	if level >= cost {
		return 0
	}
	return CeilDiv(cost-level, s.Rate)
}

// FullIn returns the microseconds until a bucket at level is full again:
// from then on forgetting it changes nothing.
func FullIn(s Spec, level int64) int64 {
	if !s.On() || level >= s.Capacity {
		return 0
	}
	return CeilDiv(s.Capacity-level, s.Rate)
}

// Settled returns level after charging delta units (a refund when negative),
// kept between one bucket of debt and a full bucket: a refund never lifts a
// bucket above capacity, and a large under-estimate delays an organization by
// at most two bucket refills rather than indefinitely.
func Settled(s Spec, level, delta int64) int64 {
	return min(max(level-delta, -s.Capacity), s.Capacity)
}

// CeilDiv is a/b rounded up, for a >= 0 and b > 0.
func CeilDiv(a, b int64) int64 { return (a + b - 1) / b }
