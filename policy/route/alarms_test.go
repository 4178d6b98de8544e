package route

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/review/alarms"
	"github.com/systemone/systemone-gateway/internal/review/monitor"
	"github.com/systemone/systemone-gateway/internal/testclock"
	"github.com/systemone/systemone-gateway/internal/wait"
)

// waitRoute decides on body until its reason is want: the watch reads the
// alarm set on its own timer.
func waitRoute(t *testing.T, r *Router, body []byte, want string) Decision {
	t.Helper()
	var d Decision
	wait.Until(t, "reason "+want, func() bool {
		d = decideBody(r, mixed, body, Signal{})
		return d.Reason == want
	})
	return d
}

// waitLog waits for a log entry with message msg.
func waitLog(t *testing.T, logs *observer.ObservedLogs, msg string) {
	t.Helper()
	wait.Until(t, "the log "+msg, func() bool { return logs.FilterMessage(msg).Len() > 0 })
}

// With on_alarm human, the questions of an alarmed (model, type) group
// route human with reason guarantee_alarm, the others by their
// thresholds, ahead of no_threshold and of unpinned auto; removing the
// group from the set brings auto back, and a Redis that cannot be read
// keeps the last known alarms.
func TestOnAlarmHuman(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	key := monitor.AlarmKey("gw:", "review:s")
	if key != "gw:review:{review:s}:alarms" {
		t.Fatalf("alarm key %q", key)
	}

	cfg := testConfig()
	cfg.Queue = &Queue{Stream: "review:s"}
	cfg.OnAlarm = OnAlarmHuman
	cfg.Unpinned = RouteAuto
	core, logs := observer.New(zap.InfoLevel)
	r, err := New(cfg, client, "gw:", zap.New(core), WithAlarmRefresh(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)

	confident := body("service-1.0.0", noul("yes", "0.99"), choice("pick", "0.99"), score("rate", "0.99"))
	// Once the alarms are read (none): the thresholds decide.
	waitRoute(t, r, confident, ReasonConfident)
	if err := client.SAdd(ctx, key, monitor.Group{Model: "service-1.0.0", Type: "choice"}.Member()).Err(); err != nil {
		t.Fatal(err)
	}
	d := waitRoute(t, r, confident, ReasonGuaranteeAlarm)
	if d.Route != RouteHuman || routes(d) != "yes=auto pick=human rate=auto" {
		t.Errorf("alarmed choice group: %s %s", d.Route, routes(d))
	}
	if got := reasons(d); got != "yes=confident pick=guarantee_alarm rate=confident" {
		t.Errorf("alarmed choice group: question reasons %s", got)
	}
	// Another version's questions are not that group's.
	other := body("service-2.0.0", noul("yes", "0.99"), choice("pick", "0.99"), score("rate", "0.99"))
	if d := decideBody(r, mixed, other, Signal{}); d.Route != RouteAuto || d.Reason != ReasonUnpinnedVersion {
		t.Errorf("unalarmed unpinned version: %s %s", d.Route, d.Reason)
	}
	// An alarm overrides unpinned auto too.
	if err := client.SAdd(ctx, key, monitor.Group{Model: "service-2.0.0", Type: "noul"}.Member()).Err(); err != nil {
		t.Fatal(err)
	}
	d = waitRoute(t, r, other, ReasonGuaranteeAlarm)
	if routes(d) != "yes=human pick=auto rate=auto" {
		t.Errorf("alarmed unpinned noul: %s", routes(d))
	}
	if got := reasons(d); got != "yes=guarantee_alarm pick=unpinned_version rate=unpinned_version" {
		t.Errorf("alarmed unpinned noul: question reasons %s", got)
	}
	// It comes before no_threshold (service-0.9.0 has only a choice
	// threshold) and after the guardrails.
	if err := client.SAdd(ctx, key, monitor.Group{Model: "service-0.9.0", Type: "choice"}.Member()).Err(); err != nil {
		t.Fatal(err)
	}
	old := body("service-0.9.0", noul("yes", "0.99"), choice("pick", "0.99"), score("rate", "0.99"))
	waitRoute(t, r, old, ReasonGuaranteeAlarm)
	if d := decideBody(r, mixed, old, Signal{GuardrailsReview: true}); d.Reason != ReasonGuardrailsReview {
		t.Errorf("guardrails review and an alarm: %s", d.Reason)
	}

	// Redis gone: the alarms stay.
	srv.Stop()
	waitLog(t, logs, "guarantee alarms unreadable; keeping the last known")
	if d := decideBody(r, mixed, confident, Signal{}); d.Reason != ReasonGuaranteeAlarm {
		t.Errorf("Redis down: %s, want the last known alarm kept", d.Reason)
	}
	srv.Restart()
	// A restarted Redis without persistence has an empty set: the alarms
	// are lost, not reset. They stay here and are written back.
	wait.Until(t, "the lost alarms written back", func() bool {
		n, _ := client.SCard(ctx, key).Result()
		return n == 3
	})
	if d := decideBody(r, mixed, confident, Signal{}); d.Reason != ReasonGuaranteeAlarm {
		t.Errorf("after a Redis restart without its data: %s, want the alarm kept", d.Reason)
	}
	if n := logs.FilterMessage("guarantee alarm lost from Redis without a reset; keeping it and writing it back").Len(); n != 3 {
		t.Errorf("%d lost-alarm logs, want 3", n)
	}
	if n := logs.FilterMessage("guarantee alarm reset: the group routes by its thresholds again").Len(); n != 0 {
		t.Errorf("a lost alarm logged as a reset")
	}
	// A reset (the review handler's: a new token with the removal) ends it.
	choiceGroup := monitor.Group{Model: "service-1.0.0", Type: "choice"}.Member()
	if _, err := client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SRem(ctx, key, choiceGroup)
		p.HSet(ctx, monitor.ResetKey("gw:", "review:s"), choiceGroup, "t1")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	waitRoute(t, r, confident, ReasonConfident)
	if logs.FilterMessage("guarantee alarms unreadable; keeping the last known").Len() != 1 ||
		logs.FilterMessage("guarantee alarms readable again").Len() != 1 ||
		logs.FilterMessage("guarantee alarm reset: the group routes by its thresholds again").Len() != 1 {
		t.Errorf("state change logs: %v", logs.All())
	}
	if n := logs.FilterMessage("guarantee alarm: routing the group human").Len(); n != 3 {
		t.Errorf("%d alarm logs, want one per group (3)", n)
	}
}

// Fail safe: an instance that has never read the alarms (Redis away since
// it started) routes every question human with guarantee_unknown, ahead
// of the thresholds, until a read succeeds.
func TestOnAlarmUnknownSinceStart(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	cfg := testConfig()
	cfg.Queue = &Queue{Stream: "review:s"}
	cfg.OnAlarm = OnAlarmHuman
	core, logs := observer.New(zap.InfoLevel)
	clock := testclock.New(time.Time{})
	r, err := New(cfg, client, "gw:", zap.New(core), WithAlarmRefresh(10*time.Millisecond), withClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	confident := body("service-1.0.0", noul("yes", "0.99"), choice("pick", "0.99"), score("rate", "0.99"))
	d := decideBody(r, mixed, confident, Signal{})
	if d.Route != RouteHuman || d.Reason != ReasonGuaranteeUnknown || routes(d) != "yes=human pick=human rate=human" {
		t.Fatalf("alarms never read: %s %s %s", d.Route, d.Reason, routes(d))
	}
	waitLog(t, logs, "guarantee alarms unreadable since start; routing every question human (guarantee_unknown)")
	srv.Restart()
	waitLog(t, logs, writeBackLog)
	clock.Advance(alarms.WriteBack(DefaultAlarmRefresh))
	waitRoute(t, r, confident, ReasonConfident)
}

const writeBackLog = "guarantee alarms readable; routing every question human (guarantee_unknown) while the gateways that kept alarms Redis lost write them back"

// A gateway started while Redis is away, which comes back without its
// data, does not route auto a group whose alarm another gateway kept
// before that gateway has had its refresh period to write it back: it
// holds guarantee_unknown for alarms.WriteBack after its first read. The
// alarm written back had been reset once before (its reset token, lost
// with it, is not a new reset).
func TestOnAlarmUnknownUntilWrittenBack(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	cfg := testConfig()
	cfg.Queue = &Queue{Stream: "review:s"}
	cfg.OnAlarm = OnAlarmHuman
	key, resets := monitor.AlarmKey("gw:", "review:s"), monitor.ResetKey("gw:", "review:s")
	alarmed := monitor.Group{Model: "service-1.0.0", Type: "choice"}.Member()
	seed := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = seed.Close() })
	if _, err := seed.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, resets, alarmed, "t1")
		p.SAdd(ctx, key, alarmed)
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Gateway a reads the alarm when it starts; its refresh is the test's
	// to call (a period far beyond the test).
	clientA := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = clientA.Close() })
	a, err := New(cfg, clientA, "gw:", nil, WithAlarmRefresh(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	confident := body("service-1.0.0", noul("yes", "0.99"), choice("pick", "0.99"), score("rate", "0.99"))
	if d := decideBody(a, mixed, confident, Signal{}); d.Reason != ReasonGuaranteeAlarm {
		t.Fatalf("gateway a: %s, want the alarm", d.Reason)
	}

	// Gateway b starts while Redis is away; Redis comes back empty.
	srv.Stop()
	clientB := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = clientB.Close() })
	core, logs := observer.New(zap.InfoLevel)
	clock := testclock.New(time.Time{})
	b, err := New(cfg, clientB, "gw:", zap.New(core), WithAlarmRefresh(5*time.Millisecond), withClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	srv.Restart()
	wait.Until(t, "gateway b reads the alarm set after Redis came back", func() bool {
		return logs.FilterMessage(writeBackLog).Len() > 0 || decideBody(b, mixed, confident, Signal{}).Reason != ReasonGuaranteeUnknown
	})
	if d := decideBody(b, mixed, confident, Signal{}); d.Reason != ReasonGuaranteeUnknown || d.Route != RouteHuman {
		t.Fatalf("gateway b on the empty set before gateway a wrote its alarm back: %s %s (%s)", d.Route, d.Reason, routes(d))
	}

	// Gateway a's next read writes the alarm back, then b's hold ends.
	a.alarms.(*alarms.Watch).Refresh(ctx)
	if ok, err := seed.SIsMember(ctx, key, alarmed).Result(); err != nil || !ok {
		t.Fatalf("gateway a did not write the lost alarm back: %v %v", ok, err)
	}
	if d := decideBody(b, mixed, confident, Signal{}); d.Reason != ReasonGuaranteeUnknown {
		t.Fatalf("gateway b before the write-back period: %s", d.Reason)
	}
	clock.Advance(alarms.WriteBack(DefaultAlarmRefresh))
	d := waitRoute(t, b, confident, ReasonGuaranteeAlarm)
	if routes(d) != "yes=auto pick=human rate=auto" {
		t.Errorf("gateway b after the write-back period: %s", routes(d))
	}
}

// With a monitor by org, an org's group in alarm sends that org's
// questions of the group human, and no other org's.
func TestOnAlarmByOrg(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	cfg := testConfig()
	cfg.Queue = &Queue{Stream: "review:s"}
	cfg.OnAlarm = OnAlarmHuman
	r, err := New(cfg, client, "gw:", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	confident := body("service-1.0.0", noul("yes", "0.99"), choice("pick", "0.99"), score("rate", "0.99"))
	waitRoute(t, r, confident, ReasonConfident)
	g := monitor.Group{Model: "service-1.0.0", Type: "noul", Org: "acme", ByOrg: true}
	if err := client.SAdd(context.Background(), monitor.AlarmKey("gw:", "review:s"), g.Member()).Err(); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the org's alarm read", func() bool {
		return decideBody(r, mixed, confident, Signal{Org: "acme"}).Reason == ReasonGuaranteeAlarm
	})
	if d := decideBody(r, mixed, confident, Signal{Org: "acme"}); routes(d) != "yes=human pick=auto rate=auto" {
		t.Errorf("acme: %s", routes(d))
	}
	for _, org := range []string{"other", ""} {
		if d := decideBody(r, mixed, confident, Signal{Org: org}); d.Reason != ReasonConfident {
			t.Errorf("org %q: %s %s", org, d.Reason, routes(d))
		}
	}
}

// Without on_alarm human nothing is read: an alarm only alerts.
func TestOnAlarmAlert(t *testing.T) {
	cfg := testConfig()
	cfg.Queue = &Queue{Stream: "s"}
	cfg.OnAlarm = OnAlarmAlert
	r, err := New(cfg, redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.alarms != nil {
		t.Error("on_alarm alert watches alarms")
	}
	cfg.OnAlarm = OnAlarmHuman
	if _, err := New(cfg, nil, "", nil); err == nil {
		t.Error("on_alarm human without redis accepted")
	}
}
