// Package alarms is the gateway's watch of the guarantee alarms the
// review loop's monitor raises: it reads the alarm set of a review stream
// from Redis on a timer, off the request path, and answers the request
// path's one question (Reader) from memory.
package alarms

import (
	"context"
	_ "embed"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/review/monitor"
)

// Reader is what the request path reads of the alarms, without a lock or
// a round trip.
type Reader interface {
	// Known reports whether a read of the alarms has succeeded since the
	// watch started; until then any group may be in alarm.
	Known() bool
	// Alarmed reports whether the question of type typ from org, answered
	// by model, belongs to a group in alarm: its (model, type) group, or
	// under a monitor `by org` its (model, type, org) group. escalatedFrom
	// is "" for a version's own answer; for the second answer of a
	// question an `escalate` block asked again, the first version: its
	// group is the escalated one, apart from model's own answers.
	Alarmed(model, typ, org, escalatedFrom string) bool
}

// alarmTimeout bounds one read of the alarm set.
const alarmTimeout = time.Second

// WriteBack is how long a watch that has not been able to read the alarms
// since it started keeps reporting them unknown after its first successful
// read, for gateways that read every period: the time the gateways that
// kept alarms Redis lost (Redis back without its data) need to write them
// back, one period of theirs and one read. Until then the set it reads may
// lack an alarm another gateway holds.
func WriteBack(period time.Duration) time.Duration { return period + alarmTimeout }

// Client is the part of a go-redis client the watch uses: one transaction
// to read the alarm set with the reset tokens, and a script to put back an
// alarm that Redis lost.
type Client interface {
	TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	redis.Scripter
}

// restoreScript puts a lost alarm back into the alarm set, unless the
// group was reset meanwhile (it has a reset token other than the one the
// gateway saw; no token at all is a reset hash lost with the alarm):
// KEYS alarm set, reset hash; ARGV member, token seen.
//
//go:embed restore.lua
var restoreLua string

var restoreScript = redis.NewScript(restoreLua)

// Watch holds the groups in guarantee alarm as last read from the set the
// review API keeps (monitor.AlarmKey); it is a Reader. It fails safe:
// until its first read succeeds it reports the alarms unknown, a failed
// read keeps the last set, and a group that leaves the set without a new
// reset token (Redis restarted without its data) stays in alarm here and
// is written back. A watch whose first reads failed stays unknown for
// WriteBack(every) after the first that succeeds: Redis may have come back
// empty, and the alarms other gateways kept are not in the set until they
// write them back.
type Watch struct {
	set          atomic.Pointer[map[monitor.Group]struct{}]
	known        atomic.Bool            // a read has succeeded, and no write-back is awaited
	readErr      atomic.Pointer[string] // why the latest read failed; nil when it succeeded
	client       Client
	key, resetKy string
	every        time.Duration // the refresh period
	now          func() time.Time
	logger       *zap.Logger
	// Only the loop touches these.
	failed bool
	// readableSince is when the first successful read of a watch whose
	// first reads failed started: it stays unknown until WriteBack later.
	// Zero while no read failed since start or none succeeded since.
	readableSince time.Time
	failedUnknown bool                     // a read failed while unknown
	tokens        map[monitor.Group]string // the reset token seen with each alarm
	stop          context.CancelFunc
	wg            sync.WaitGroup
}

// Start reads the alarms of the review stream under prefix once and then
// every period, until Close. now is its clock (nil: time.Now); a nil
// logger discards the watch's logs.
func Start(client Client, prefix, stream string, every time.Duration, now func() time.Time, logger *zap.Logger) *Watch {
	if logger == nil {
		logger = zap.NewNop()
	}
	if now == nil {
		now = time.Now
	}
	ctx, stop := context.WithCancel(context.Background())
	key, resetKey := monitor.AlarmKey(prefix, stream), monitor.ResetKey(prefix, stream)
	w := &Watch{client: client, key: key, resetKy: resetKey, every: every, now: now, logger: logger, stop: stop, tokens: map[monitor.Group]string{}}
	w.set.Store(&map[monitor.Group]struct{}{})
	// The first read before the first request: a gateway started while
	// Redis answers knows its alarms at once, instead of routing
	// everything human (guarantee_unknown) until the first tick.
	w.Refresh(ctx)
	w.wg.Add(1)
	go w.loop(ctx)
	return w
}

func (w *Watch) loop(ctx context.Context) {
	defer w.wg.Done()
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.Refresh(ctx)
	}
}

// Refresh reads the alarm set and the reset tokens once, and logs each
// group that starts or stops routing human here, each alarm lost, and each
// change between failing and working reads. The watch's loop calls it
// every period; a test may call it between two of the loop's.
func (w *Watch) Refresh(ctx context.Context) {
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
				zap.String("key", w.key), zap.Duration("for", WriteBack(w.every)))
		}
	}
	if w.failedUnknown && start.Before(w.readableSince.Add(WriteBack(w.every))) {
		return
	}
	tokens := resets.Val()
	next := make(map[monitor.Group]struct{}, len(members.Val()))
	for _, m := range members.Val() {
		if g, ok := monitor.ParseMember(m); ok {
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

func groupFields(g monitor.Group) []zap.Field {
	fields := []zap.Field{zap.String("model", g.Model), zap.String("type", g.Type)}
	if g.ByOrg {
		fields = append(fields, zap.String("org", g.Org))
	}
	if g.EscalatedFrom != "" {
		fields = append(fields, zap.String("escalated_from", g.EscalatedFrom))
	}
	return fields
}

// Alarmed is Reader's.
func (w *Watch) Alarmed(model, typ, org, escalatedFrom string) bool {
	set := *w.set.Load()
	if _, ok := set[monitor.Group{Model: model, Type: typ, EscalatedFrom: escalatedFrom}]; ok {
		return true
	}
	_, ok := set[monitor.Group{Model: model, Type: typ, Org: org, ByOrg: true, EscalatedFrom: escalatedFrom}]
	return ok
}

// Known is Reader's.
func (w *Watch) Known() bool { return w.known.Load() }

// Problem is "" while the latest read of the alarm set succeeded and the
// alarms are known; else it says whether the set was never read, was read
// but is held while lost alarms are written back, or the latest read
// failed (the last set read stays in force), and why. For a readiness
// check: a few atomic loads.
func (w *Watch) Problem() string {
	err := w.readErr.Load()
	switch {
	case !w.known.Load() && err != nil:
		return "never read: " + *err
	case !w.known.Load():
		return "not yet known: waiting for lost alarms to be written back"
	case err != nil:
		return "stale, the latest read failed: " + *err
	}
	return ""
}

// Close stops the reads and waits for the one under way.
func (w *Watch) Close() {
	w.stop()
	w.wg.Wait()
}
