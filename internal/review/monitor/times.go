package monitor

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// When a group's alarm was raised and when it was last reset: the natural
// starting points of what to label and recalibrate from after an alarm.
// The scripts write them from Redis's clock (TIME), the clock the review
// stream's entry ids come from, as the first millisecond after the event:
// the entries with ids at or after it are exactly those queued after it,
// whatever the clocks of the gateways and review handlers.

// Listed is a group's state with its alarm's and its last reset's times.
type Listed struct {
	State
	// RaisedAt is when the current alarm was raised; zero when the group
	// is not in alarm, or its alarm was restored by a gateway after Redis
	// lost its data (when it was raised is lost with it).
	RaisedAt time.Time
	// ResetAt is when the group was last reset; zero when never.
	ResetAt time.Time
}

// RaisedAtKey is the hash of each group in alarm's raising time (Unix ms).
func RaisedAtKey(prefix, stream string) string { return StateKey(prefix, stream) + ":raised_at" }

// ResetAtKey is the hash of each reset group's last reset time (Unix ms).
func ResetAtKey(prefix, stream string) string { return StateKey(prefix, stream) + ":reset_at" }

// List reads what Groups reads, with each group's RaisedAt and ResetAt, in
// one transaction.
func (s *Store) List(ctx context.Context, p Params) (map[Group]Listed, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var all, raised, reset *redis.MapStringStringCmd
	var alarms *redis.StringSliceCmd
	if _, err := s.client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		keys := s.Keys()
		all = pipe.HGetAll(ctx, keys[0])
		alarms = pipe.SMembers(ctx, keys[1])
		raised = pipe.HGetAll(ctx, keys[0]+":raised_at")
		reset = pipe.HGetAll(ctx, keys[0]+":reset_at")
		return nil
	}); err != nil {
		return nil, err
	}
	out := make(map[Group]Listed, len(all.Val()))
	for m, v := range all.Val() {
		g, ok := ParseMember(m)
		st, err := Decode(v)
		if ok && err == nil {
			out[g] = Listed{State: st.At(p)}
		}
	}
	for _, m := range alarms.Val() {
		if g, ok := ParseMember(m); ok {
			if _, has := out[g]; !has {
				st := Fresh(p.Target)
				st.Alarm = true
				out[g] = Listed{State: st}
			}
		}
	}
	for g, l := range out {
		if l.Alarm {
			l.RaisedAt = unixMilli(raised.Val()[g.Member()])
		}
		l.ResetAt = unixMilli(reset.Val()[g.Member()])
		out[g] = l
	}
	return out, nil
}

// unixMilli reads a time the scripts wrote; zero when absent or unread.
func unixMilli(v string) time.Time {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
