package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/systemone/systemone-gateway/internal/review/monitor"
)

// A correction after the monitor took its entry: a correction to a
// disagreement moves the group's evidence at the bet the entry was taken
// at (monitor.Correct), lowers agree, is counted in late_corrections and
// logged, and can raise the alarm; a correction to an agreement only
// counts. An entry with more auto questions than max_questions is
// refused, and GET /guarantee counts it.
func TestLateCorrectionReachesMonitor(t *testing.T) {
	s, client := testStore(t)
	ctx := context.Background()
	core, logs := observer.New(zap.InfoLevel)
	h := monitorHandler(&Handler{store: s, logger: zap.New(core), Monitor: &Monitor{Target: 0.9, Settle: durationOf(0)},
		CorrectWithin: durationOf(0), MaxQuestions: 2}, time.Now)
	params := h.monitor.params
	serve := serveWith(t, h)
	add := func(i, questions int) string {
		t.Helper()
		var qs []string
		for q := range questions {
			qs = append(qs, fmt.Sprintf(`{"id":"q%d","type":"noul","route":"auto","confidence":0.9,"answer":0.9}`, q))
		}
		id, err := client.XAdd(ctx, &redis.XAddArgs{Stream: s.stream, Values: []string{"request_id", fmt.Sprint("r", i), "model", "m", "audit", "1",
			"questions", "[" + strings.Join(qs, ",") + "]"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	put := func(id, body string) {
		t.Helper()
		if w := serve(http.MethodPut, "/items/"+id+"/labels", body); w.Code != 204 {
			t.Fatalf("PUT %s %s: %d %s", id, body, w.Code, w.Body)
		}
	}
	group := func() map[string]any {
		t.Helper()
		var doc struct{ Groups []map[string]any }
		if err := json.Unmarshal(serve(http.MethodGet, "/guarantee", "").Body.Bytes(), &doc); err != nil || len(doc.Groups) != 1 {
			t.Fatalf("GET /guarantee: %v %+v", err, doc)
		}
		return doc.Groups[0]
	}
	// Disagreements first, so that the bet grows; each entry taken at
	// once (settle 0s, correct_within 0s), and the state followed in Go.
	want := monitor.Fresh(0.9)
	for i := range 3 {
		put(add(i, 1), `{"labels":{"q0":false}}`)
		want, _ = monitor.Update(params, want, 0, 1)
	}
	bet := want.Bet
	if bet <= 0 {
		t.Fatalf("bet %v after three disagreements, want > 0", bet)
	}
	agreeing := add(3, 2)
	put(agreeing, `{"labels":{"q0":true,"q1":true}}`)
	taking := monitor.Taking{Bet: bet, Sequence: want.Sequence, Target: 0.9, Agree: 2, Labels: 2, MaxQuestions: 2}
	want, _ = monitor.Update(params, want, 2, 2)
	if g := group(); g["evidence"] != want.Evidence || g["agree"] != 2.0 || g["late_corrections"] != 0.0 {
		t.Fatalf("before the correction: %v, want evidence %v", g, want.Evidence)
	}

	// q0 corrected to a disagreement after the entry was taken.
	put(agreeing, `{"labels":{"q0":false},"reviewer":"bob"}`)
	want, _ = monitor.Correct(params, want, taking)
	g := group()
	if g["evidence"] != want.Evidence || g["agree"] != 1.0 || g["labels"] != 5.0 || g["entries"] != 4.0 || g["late_corrections"] != 1.0 {
		t.Fatalf("after a late correction to a disagreement: %v, want evidence %v, agree 1 of 5, 1 late correction", g, want.Evidence)
	}
	if want.Evidence <= 0 || len(logs.FilterMessage("late correction to a disagreement applied to the guarantee monitor").All()) != 1 {
		t.Errorf("the correction was not logged as applied: %v", logs.All())
	}
	// Corrected back to an agreement, and q0 again: only counted.
	put(agreeing, `{"labels":{"q0":true}}`)
	put(agreeing, `{"labels":{"q0":false}}`)
	if g := group(); g["evidence"] != want.Evidence || g["agree"] != 1.0 || g["late_corrections"] != 3.0 {
		t.Fatalf("a correction back, then again: %v, want evidence %v unchanged, 3 late corrections", g, want.Evidence)
	}
	// An entry of three questions, above max_questions 2: refused.
	put(add(4, 3), `{"labels":{"q0":true,"q1":true,"q2":true}}`)
	if g := group(); g["refused"] != 1.0 || g["entries"] != 4.0 {
		t.Fatalf("an entry above max_questions: %v, want refused 1, entries 4", g)
	}

	// Late corrections enough to raise the alarm: rounds of two
	// disagreements, an entry of two agreeing answers (taken at the bet
	// they raised), 16 agreeing entries and one more of two: 20 of 22
	// answers agree, above the target, and the alarm stays down; then
	// each round's first agreeing entry is corrected to two
	// disagreements (18 of 22).
	var late []string
	n := 100
	next := func(questions int) string { n++; return add(n, questions) }
	for range 10 {
		for range 2 {
			put(next(1), `{"labels":{"q0":false}}`)
		}
		id := next(2)
		put(id, `{"labels":{"q0":true,"q1":true}}`)
		late = append(late, id)
		for range 16 {
			put(next(1), `{"labels":{"q0":true}}`)
		}
		put(next(2), `{"labels":{"q0":true,"q1":true}}`)
	}
	if g := group(); g["alarm"] == true {
		t.Fatalf("in alarm before the corrections: %v", g)
	}
	for _, id := range late {
		put(id, `{"labels":{"q0":false,"q1":false}}`)
	}
	g = group()
	threshold := params.Threshold(1)
	if g["alarm"] != true || g["evidence"].(float64) < threshold {
		t.Fatalf("after 20 late disagreements: %v, want the alarm raised (evidence >= %v)", g, threshold)
	}
	if len(logs.FilterMessage("guarantee alarm").All()) != 1 {
		t.Errorf("the alarm raised by a late correction was not logged once: %v", logs.FilterMessage("guarantee alarm").All())
	}
	if in, _ := client.SIsMember(ctx, monitor.AlarmKey("systemone:", s.stream), monitor.Group{Model: "m", Type: "noul"}.Member()).Result(); !in {
		t.Error("the alarm is not in the alarm set the gateways read")
	}
}
