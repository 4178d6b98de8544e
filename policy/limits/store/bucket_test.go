package store

import (
	"testing"
	"time"
)

func TestRefill(t *testing.T) {
	s := Spec{Capacity: 10 * Unit, Rate: 10} // 10 per minute
	const minute = int64(60_000_000)
	for _, tc := range []struct {
		name string
		b    Stored
		now  int64
		want int64
	}{
		{"never seen is full", Stored{}, 5, 10 * Unit},
		{"no time, no refill", Stored{Level: 3 * Unit, At: 100, Known: true}, 100, 3 * Unit},
		{"clock backwards", Stored{Level: 3 * Unit, At: 100, Known: true}, 50, 3 * Unit},
		{"one request per 6s", Stored{Level: 3 * Unit, At: 0, Known: true}, minute / 10, 4 * Unit},
		{"partial", Stored{Level: 0, At: 0, Known: true}, 1, 10},
		{"exactly full", Stored{Level: 0, At: 0, Known: true}, minute, 10 * Unit},
		{"capped at capacity", Stored{Level: 0, At: 0, Known: true}, 100 * minute, 10 * Unit},
		{"capacity lowered", Stored{Level: 20 * Unit, At: 0, Known: true}, 0, 10 * Unit},
		{"debt repaid", Stored{Level: -10 * Unit, At: 0, Known: true}, minute, 0},
	} {
		if got := Refill(s, tc.b, tc.now); got != tc.want {
			t.Errorf("%s: refill = %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := WaitFor(s, 0, Unit); got != minute/10 {
		t.Errorf("waitFor one request = %dµs, want %d", got, minute/10)
	}
	if got := WaitFor(s, Unit-1, Unit); got != 1 {
		t.Errorf("waitFor one Unit = %dµs, want 1 (rounded up)", got)
	}
	if got := Settled(s, 9*Unit, -5*Unit); got != 10*Unit {
		t.Errorf("refund above capacity: %d, want %d", got, 10*Unit)
	}
	if got := Settled(s, 0, 50*Unit); got != -10*Unit {
		t.Errorf("debt floor: %d, want %d", got, -10*Unit)
	}
}

// A time without a monotonic reading is the microsecond its UnixMicro
// names, on either side of the process's start, so that the in-process
// store and Redis (which a test pins to the same clock) agree.
func TestMicrosIsUnixMicro(t *testing.T) {
	for _, at := range []time.Time{
		time.Date(2026, 11, 23, 23, 50, 0, 0, time.UTC),
		time.Date(2026, 11, 23, 23, 50, 0, 999, time.UTC),
		time.Date(2026, 11, 23, 23, 50, 0, 1001, time.UTC),
		time.Date(2001, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(2099, 1, 1, 0, 0, 0, 999_999_999, time.UTC),
		time.Now().Round(0),
	} {
		if got, want := Micros(at), at.UnixMicro(); got != want {
			t.Errorf("Micros(%s) = %d, want %d", at.Format(time.RFC3339Nano), got, want)
		}
	}
}
