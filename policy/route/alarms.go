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
	// ReasonGuaranteeAlarm, on every instance sharing the Redis; while an
	// instance has never read the alarms, every question routes human
	// with ReasonGuaranteeUnknown.
	OnAlarmHuman = "human"
)

// onAlarmValues lists the values of Config.OnAlarm, the default first.
var onAlarmValues = []string{OnAlarmAlert, OnAlarmHuman}

// DefaultAlarmRefresh is how often a Router with `on_alarm human` reads the
// set of groups in alarm from Redis (one MULTI of two reads, off the
// request path), unless WithAlarmRefresh says otherwise: an alarm routes
// human on every instance within this period plus one take of the review
// handler (1s) after the observation that raised it, well within the 10
// seconds promised.
const DefaultAlarmRefresh = 2 * time.Second

// alarmTimeout bounds one read of the alarm set.
const alarmTimeout = time.Second

// AlarmWriteBack is how long a gateway that has not been able to read the
// alarms since it started keeps routing every question human
// (guarantee_unknown) after its first successful read: the time the
// gateways that kept alarms Redis lost (Redis back without its data) need
// to write them back, one refresh period of theirs and one read. Until
// then the set it reads may lack an alarm another gateway holds.
const AlarmWriteBack = DefaultAlarmRefresh + alarmTimeout

// AlarmReader is the part of a go-redis client the alarm watch uses: one
// transaction to read the alarm set with the reset tokens, and a script
// to put back an alarm that Redis lost.
type AlarmReader interface {
	TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	redis.Scripter
}

// restoreScript puts a lost alarm back into the alarm set, unless the
// group was reset meanwhile (it has a reset token other than the one the
// gateway saw; no token at all is a reset hash lost with the alarm):
// KEYS alarm set, reset hash; ARGV member, token seen.
var restoreScript = redis.NewScript(`
local token = redis.call('HGET', KEYS[2], ARGV[1]) or ''
if token ~= '' and token ~= ARGV[2] then return 0 end
return redis.call('SADD', KEYS[1], ARGV[1])
`)

// alarmWatch holds the groups in guarantee alarm as last read from the set
// the review handler keeps (guarantee.AlarmKey). Decide reads it without a
// lock or a round trip. It fails safe: until its first read succeeds it
// reports the alarms unknown, a failed read keeps the last set, and a group
// that leaves the set without a new reset token (Redis restarted without
// its data) stays in alarm here and is written back. An instance whose
// first reads failed stays unknown for AlarmWriteBack after the first that
// succeeds: Redis may have come back empty, and the alarms other instances
// kept are not in the set until they write them back.
type alarmWatch struct {
	set          atomic.Pointer[map[guarantee.Group]struct{}]
	known        atomic.Bool            // a read has succeeded
	readErr      atomic.Pointer[string] // why the latest read failed; nil when it succeeded
	client       AlarmReader
	key, resetKy string
	every        time.Duration // the refresh period
	logger       *zap.Logger
	now          func() time.Time
	// Only the loop touches these.
	failed bool
	// readableSince is when the first successful read of an instance whose
	// first reads failed started: it stays unknown until AlarmWriteBack
	// later. Zero while no read failed since start or none succeeded since.
	readableSince time.Time
	failedUnknown bool                       // a read failed while unknown
	tokens        map[guarantee.Group]string // the reset token seen with each alarm
	stop          context.CancelFunc
	wg            sync.WaitGroup
}

func newAlarmWatch(client AlarmReader, key, resetKey string, every time.Duration, now func() time.Time, logger *zap.Logger) *alarmWatch {
	ctx, stop := context.WithCancel(context.Background())
	w := &alarmWatch{client: client, key: key, resetKy: resetKey, every: every, now: now, logger: logger, stop: stop, tokens: map[guarantee.Group]string{}}
	w.set.Store(&map[guarantee.Group]struct{}{})
	// The first read before the first request: a gateway started while
	// Redis answers knows its alarms at once, instead of routing
	// everything human (guarantee_unknown) until the first tick.
	w.refresh(ctx)
	w.wg.Add(1)
	go w.loop(ctx)
	return w
}

func (w *alarmWatch) loop(ctx context.Context) {
	defer w.wg.Done()
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.refresh(ctx)
	}
}

// refresh reads the alarm set and the reset tokens once, and logs each
// group that starts or stops routing human here, each alarm lost, and each
// change between failing and working reads.
func (w *alarmWatch) refresh(ctx context.Context) {
	start := w.now()
	read, cancel := context.WithTimeout(ctx, alarmTimeout)
	var members *redis.StringSliceCmd
	var resets *redis.MapStringStringCmd
	_, err := w.client.TxPipelined(read, func(p redis.Pipeliner) error {
		members = p.SMembers(read, w.key)
		resets = p.HGetAll(read, w.resetKy)
		return nil
	})
	cancel()
	if err != nil {
		if !w.known.Load() {
			w.failedUnknown = true
			w.readableSince = time.Time{}
		}
		if ctx.Err() == nil {
			msg := err.Error()
			w.readErr.Store(&msg)
		}
		if ctx.Err() == nil && !w.failed {
			w.failed = true
			if w.known.Load() {
				w.logger.Warn("guarantee alarms unreadable; keeping the last known", zap.String("key", w.key), zap.Error(err))
			} else {
				w.logger.Warn("guarantee alarms unreadable since start; routing every question human (guarantee_unknown)", zap.String("key", w.key), zap.Error(err))
			}
		}
		return
	}
	w.readErr.Store(nil)
	if w.failed {
		w.failed = false
		if w.known.Load() {
			w.logger.Info("guarantee alarms readable again", zap.String("key", w.key))
		} else {
			w.readableSince = start
			w.logger.Info("guarantee alarms readable; routing every question human (guarantee_unknown) while the gateways that kept alarms Redis lost write them back",
				zap.String("key", w.key), zap.Duration("for", AlarmWriteBack))
		}
	}
	if w.failedUnknown && start.Before(w.readableSince.Add(AlarmWriteBack)) {
		return
	}
	tokens := resets.Val()
	next := make(map[guarantee.Group]struct{}, len(members.Val()))
	for _, m := range members.Val() {
		if g, ok := guarantee.ParseMember(m); ok {
			next[g] = struct{}{}
		}
	}
	prev := *w.set.Load()
	for g := range prev {
		if _, still := next[g]; still {
			continue
		}
		member := g.Member()
		if token := tokens[member]; token != "" && token != w.tokens[g] {
			w.logger.Info("guarantee alarm reset: the group routes by its thresholds again", groupFields(g)...)
			delete(w.tokens, g)
			continue
		}
		// Gone without a reset: Redis lost it. It stays, and goes back.
		next[g] = struct{}{}
		w.logger.Warn("guarantee alarm lost from Redis without a reset; keeping it and writing it back", groupFields(g)...)
		restore, cancel := context.WithTimeout(ctx, alarmTimeout)
		if err := restoreScript.Run(restore, w.client, []string{w.key, w.resetKy}, member, w.tokens[g]).Err(); err != nil && ctx.Err() == nil {
			w.logger.Warn("guarantee alarm could not be written back; keeping it here", append(groupFields(g), zap.Error(err))...)
		}
		cancel()
	}
	for g := range next {
		if _, was := prev[g]; !was {
			w.tokens[g] = tokens[g.Member()]
			w.logger.Warn("guarantee alarm: routing the group human", groupFields(g)...)
		}
	}
	w.set.Store(&next)
	w.known.Store(true)
	w.failedUnknown = false
}

func groupFields(g guarantee.Group) []zap.Field {
	fields := []zap.Field{zap.String("model", g.Model), zap.String("type", g.Type)}
	if g.ByOrg {
		fields = append(fields, zap.String("org", g.Org))
	}
	return fields
}

// alarmed reports whether the question of type typ from org, answered by
// model, belongs to a group in alarm: its (model, type) group, or under a
// monitor `by org` its (model, type, org) group.
func (w *alarmWatch) alarmed(model, typ, org string) bool {
	set := *w.set.Load()
	if _, ok := set[guarantee.Group{Model: model, Type: typ}]; ok {
		return true
	}
	_, ok := set[guarantee.Group{Model: model, Type: typ, Org: org, ByOrg: true}]
	return ok
}

// any reports whether some group is in alarm.
func (w *alarmWatch) any() bool { return len(*w.set.Load()) > 0 }

// unknown reports whether no read of the alarms has succeeded yet.
func (w *alarmWatch) unknown() bool { return !w.known.Load() }

func (w *alarmWatch) close() {
	w.stop()
	w.wg.Wait()
}
