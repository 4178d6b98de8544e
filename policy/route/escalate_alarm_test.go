package route

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/review/monitor"
	"github.com/systemone/systemone-gateway/internal/wait"
)

// With on_alarm human, the escalated group (the second version's answers
// to the questions escalated from the first) is a group of its own: in
// alarm, its answers route human with guarantee_alarm while the second
// version's own answers of the same type, and the first version's, route
// by their thresholds; the second version's own group in alarm leaves the
// escalated answers auto. Against a real Redis, read by the router's
// watch.
func TestOnAlarmHumanEscalatedGroup(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	key := monitor.AlarmKey("gw:", "review:s")

	cfg := escalateConfig()
	// The second version serves clients that ask for it too.
	cfg.Pins = append(cfg.Pins, Pin{Version: "service-2.0.0", Noul: ptr(0.6)})
	cfg.Queue = &Queue{Stream: "review:s"}
	cfg.OnAlarm = OnAlarmHuman
	r, err := New(cfg, client, "gw:", nil, WithAlarmRefresh(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)

	qs := []evaluation.Question{q("sure", "noul"), q("unsure", "noul")}
	first := body("service-1.0.0", noul("sure", "0.99"), noul("unsure", "0.5"))
	second, err := evaluation.ParseResponse(body("service-2.0.0", noul("unsure", "0.9")))
	if err != nil {
		t.Fatal(err)
	}
	direct := body("service-2.0.0", noul("sure", "0.99"), noul("unsure", "0.9"))
	// escalate decides on first and applies the second answer.
	escalate := func() Decision {
		t.Helper()
		d := decideBody(r, qs, first, Signal{})
		plan, ok := r.Escalation(d)
		if !ok {
			t.Fatalf("not escalated: %s %s", d.Reason, reasons(d))
		}
		r.ApplyEscalation(&d, plan, second)
		return d
	}
	// setAlarm raises g's alarm alone: the alarms before it are reset,
	// as DELETE /guarantee does (a new reset token), not lost.
	resets := 0
	setAlarm := func(g monitor.Group) {
		t.Helper()
		raised, err := client.SMembers(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range raised {
			resets++
			if err := client.HSet(ctx, monitor.ResetKey("gw:", "review:s"), m, resets).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := client.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		if err := client.SAdd(ctx, key, g.Member()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitDirect := func(want string) {
		t.Helper()
		wait.Until(t, "the second version's own answers routed "+want, func() bool {
			return decideBody(r, qs, direct, Signal{}).Reason == want
		})
	}

	// No alarm: unsure is answered by the second version.
	wait.Until(t, "the alarms read", r.alarms.Known)
	if d := escalate(); d.Route != RouteAuto || d.Reason != ReasonEscalated || reasons(d) != "sure=confident unsure=escalated" {
		t.Fatalf("no alarm: %s %s (%s)", d.Route, d.Reason, reasons(d))
	}

	// The escalated group in alarm: the second answer goes to a person,
	// for the alarm; the first version's confident answer and the second
	// version's own answers of the same type are untouched.
	setAlarm(monitor.Group{Model: "service-2.0.0", Type: "noul", EscalatedFrom: "service-1.0.0"})
	var d Decision
	wait.Until(t, "the escalated group's alarm", func() bool {
		d = escalate()
		return d.Reason == ReasonGuaranteeAlarm
	})
	u := d.Questions[1]
	if d.Route != RouteHuman || reasons(d) != "sure=confident unsure=guarantee_alarm" || u.Escalated == nil ||
		u.Escalated.Route != RouteHuman || u.Escalated.FirstReason != ReasonLowConfidence || u.Certificate != "" {
		t.Errorf("escalated group in alarm: %s %s (%s), unsure %+v", d.Route, d.Reason, reasons(d), u)
	}
	if d := decideBody(r, qs, direct, Signal{}); d.Route != RouteAuto || d.Reason != ReasonConfident {
		t.Errorf("escalated group in alarm: the second version asked directly routed %s %s, want auto confident", d.Route, d.Reason)
	}

	// The second version's own group in alarm: its direct answers go to
	// people, the escalated answers are not that group's.
	setAlarm(monitor.Group{Model: "service-2.0.0", Type: "noul"})
	waitDirect(ReasonGuaranteeAlarm)
	wait.Until(t, "the escalated group's alarm reset", func() bool { return escalate().Reason != ReasonGuaranteeAlarm })
	if d := escalate(); d.Route != RouteAuto || d.Reason != ReasonEscalated {
		t.Errorf("the second version's own group in alarm: escalated %s %s (%s), want auto escalated", d.Route, d.Reason, reasons(d))
	}

	// An escalated group of another first version is another group.
	setAlarm(monitor.Group{Model: "service-2.0.0", Type: "noul", EscalatedFrom: "service-0.9.0"})
	waitDirect(ReasonConfident)
	if ok, _ := client.SIsMember(ctx, key, monitor.Group{Model: "service-2.0.0", Type: "noul", EscalatedFrom: "service-0.9.0"}.Member()).Result(); !ok {
		t.Fatal("the other escalated group's alarm is not raised")
	}
	if d := escalate(); d.Reason != ReasonEscalated {
		t.Errorf("another first version's escalated group in alarm: %s (%s), want escalated", d.Reason, reasons(d))
	}
}
