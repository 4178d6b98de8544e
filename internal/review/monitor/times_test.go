package monitor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/redistest"
)

// An alarm's raised_at and a reset's reset_at are Redis's time when the
// take raised it and when the reset ran; a reset clears raised_at; an
// alarm restored without its state (Redis lost its data) has none.
func TestRaisedAtAndResetAt(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	store := NewStore(client, "t:", "s", 5*time.Second)
	p := Params{Target: 0.9, Alpha: 0.2}
	g := Group{Model: "m", Type: "noul"}

	before := time.Now().Add(-time.Second) // Redis's clock and this one: the same machine
	var raised bool
	for i := 0; i < 200 && !raised; i++ {
		entry := fmt.Sprintf("%08d", i)
		if err := noteScript.Run(ctx, client, store.Keys(), entry, 0, fmt.Sprint("r", i), "q", g.Member(), 0, 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
		updates, err := store.Take(ctx, time.UnixMilli(1), p, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range updates {
			raised = raised || u.Raised
		}
	}
	after := time.Now().Add(time.Second)
	if !raised {
		t.Fatal("no alarm after 200 disagreeing entries")
	}
	listed, err := store.List(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	l := listed[g]
	if !l.Alarm || l.RaisedAt.Before(before) || l.RaisedAt.After(after) || !l.ResetAt.IsZero() {
		t.Fatalf("in alarm: %+v, want raised_at in [%v, %v] and no reset", l, before, after)
	}
	if states, _ := store.Groups(ctx, p); states[g] != l.State {
		t.Errorf("Groups %+v, List %+v", states[g], l.State)
	}

	if _, found, err := store.Reset(ctx, g, p); err != nil || !found {
		t.Fatalf("reset: %v %v", found, err)
	}
	listed, _ = store.List(ctx, p)
	if l := listed[g]; l.Alarm || !l.RaisedAt.IsZero() || l.ResetAt.Before(before) || l.ResetAt.After(time.Now().Add(time.Second)) {
		t.Errorf("after the reset: %+v, want no raised_at and reset_at now", l)
	}

	// An alarm a gateway wrote back after Redis lost the data: raised, when unknown.
	lost := Group{Model: "m", Type: "choice"}
	if err := client.SAdd(ctx, AlarmKey("t:", "s"), lost.Member()).Err(); err != nil {
		t.Fatal(err)
	}
	listed, _ = store.List(ctx, p)
	if l := listed[lost]; !l.Alarm || !l.RaisedAt.IsZero() || !l.ResetAt.IsZero() {
		t.Errorf("a restored alarm: %+v", l)
	}
}
