package store

import "time"

// epoch anchors the in-process clock: times are microseconds since the Unix
// epoch as of process start plus the time since then on the monotonic
// clock, so wall-clock steps never refill or drain a bucket. (Counting from
// the Unix epoch keeps a test's clock set to a past date positive.)
var (
	epoch       = time.Now()
	epochMicros = epoch.UnixMicro()
	// epochRest is what UnixMicro cut off epoch: counting from the whole
	// microsecond, a time without a monotonic reading (a test's clock)
	// lands on the microsecond its UnixMicro names, as in Redis.
	epochRest = time.Duration(epoch.Nanosecond() % 1000)
)

// Micros is t on the in-process buckets' clock, in microseconds.
func Micros(t time.Time) int64 {
	d := t.Sub(epoch) + epochRest
	us := int64(d / time.Microsecond)
	if d < 0 && d%time.Microsecond != 0 {
		us-- // floor, as UnixMicro does
	}
	return epochMicros + us
}
