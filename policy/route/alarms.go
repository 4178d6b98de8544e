package route

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/policy/guarantee"
)

// Values of Config.OnAlarm.
const (
	// OnAlarmAlert: a guarantee alarm is the review handler's log entry,
	// metrics and alert; routing goes on as the thresholds say.
	OnAlarmAlert = "alert"
	// OnAlarmHuman: the questions of a group in alarm route human with
	// ReasonGuaranteeAlarm, on every instance sharing the Redis.
	OnAlarmHuman = "human"
)

// OnAlarms lists the values of Config.OnAlarm, the default first.
var OnAlarms = []string{OnAlarmAlert, OnAlarmHuman}

// AlarmRefresh is how often a Router with `on_alarm human` reads the set of
// groups in alarm from Redis (one SMEMBERS, off the request path): an
// alarm routes human on every instance within this period plus one round
// trip of the label that raised it, well within the 10 seconds promised.
// A variable so that tests can shorten it.
var AlarmRefresh = 2 * time.Second

// alarmTimeout bounds one read of the alarm set.
const alarmTimeout = time.Second

// AlarmReader is the part of a go-redis client the alarm watch uses.
type AlarmReader interface {
	SMembers(ctx context.Context, key string) *redis.StringSliceCmd
}

// alarmWatch holds the groups in guarantee alarm as last read from the set
// the review handler keeps (guarantee.AlarmKey). Decide reads it without
// a lock or a round trip. A failed read keeps the last set: an alarm is
// not lifted because Redis could not be asked.
type alarmWatch struct {
	set    atomic.Pointer[map[guarantee.Group]struct{}]
	client AlarmReader
	key    string
	logger *zap.Logger
	failed bool // the last read failed; only the loop touches it
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

func newAlarmWatch(client AlarmReader, key string, logger *zap.Logger) *alarmWatch {
	ctx, stop := context.WithCancel(context.Background())
	w := &alarmWatch{client: client, key: key, logger: logger, stop: stop}
	w.set.Store(&map[guarantee.Group]struct{}{})
	w.wg.Add(1)
	go w.loop(ctx)
	return w
}

func (w *alarmWatch) loop(ctx context.Context) {
	defer w.wg.Done()
	t := time.NewTicker(AlarmRefresh)
	defer t.Stop()
	for {
		w.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh reads the alarm set once, and logs each group that starts or
// stops routing human here, and each change between failing and working
// reads.
func (w *alarmWatch) refresh(ctx context.Context) {
	read, cancel := context.WithTimeout(ctx, alarmTimeout)
	members, err := w.client.SMembers(read, w.key).Result()
	cancel()
	if err != nil {
		if ctx.Err() == nil && !w.failed {
			w.failed = true
			w.logger.Warn("guarantee alarms unreadable; keeping the last known", zap.String("key", w.key), zap.Error(err))
		}
		return
	}
	if w.failed {
		w.failed = false
		w.logger.Info("guarantee alarms readable again", zap.String("key", w.key))
	}
	next := make(map[guarantee.Group]struct{}, len(members))
	for _, m := range members {
		if g, ok := guarantee.ParseMember(m); ok {
			next[g] = struct{}{}
		}
	}
	prev := *w.set.Load()
	for g := range next {
		if _, was := prev[g]; !was {
			w.logger.Warn("guarantee alarm: routing the group human", zap.String("model", g.Model), zap.String("type", g.Type))
		}
	}
	for g := range prev {
		if _, still := next[g]; !still {
			w.logger.Info("guarantee alarm reset: the group routes by its thresholds again", zap.String("model", g.Model), zap.String("type", g.Type))
		}
	}
	w.set.Store(&next)
}

// alarmed reports whether the group is in alarm.
func (w *alarmWatch) alarmed(model, typ string) bool {
	_, ok := (*w.set.Load())[guarantee.Group{Model: model, Type: typ}]
	return ok
}

// any reports whether some group is in alarm.
func (w *alarmWatch) any() bool { return len(*w.set.Load()) > 0 }

func (w *alarmWatch) close() {
	w.stop()
	w.wg.Wait()
}
