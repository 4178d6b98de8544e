package alarms

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/review/monitor"
	"github.com/systemone/systemone-gateway/internal/wait"
)

// The watch as the request path reads it: unknown until its first read,
// a group's alarm by (model, type) or, under `by org`, by (model, type,
// org); an alarm that leaves the set without a new reset token stays and
// is written back; one that leaves with a new token is cleared.
func TestWatch(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	key, resets := monitor.AlarmKey("gw:", "s"), monitor.ResetKey("gw:", "s")
	pooled := monitor.Group{Model: "m", Type: "noul"}
	perOrg := monitor.Group{Model: "m", Type: "choice", Org: "acme", ByOrg: true}
	// The second version e's answers to m's escalated score questions.
	escalated := monitor.Group{Model: "e", Type: "score", EscalatedFrom: "m"}
	if err := client.SAdd(ctx, key, pooled.Member(), perOrg.Member(), escalated.Member()).Err(); err != nil {
		t.Fatal(err)
	}

	var r Reader = Start(client, "gw:", "s", 10*time.Millisecond, nil, nil)
	t.Cleanup(r.(*Watch).Close)
	if !r.Known() {
		t.Fatal("the first read happens before Start returns")
	}
	for _, c := range []struct {
		model, typ, org, from string
		want                  bool
	}{
		{"m", "noul", "", "", true}, {"m", "noul", "acme", "", true}, // the pooled group holds every org
		{"m", "choice", "acme", "", true}, {"m", "choice", "other", "", false},
		{"m", "score", "", "", false}, {"n", "noul", "", "", false},
		// The escalated group is apart from the versions' own answers:
		// e's own score answers and m's are not in alarm, nor e's
		// answers escalated from another version.
		{"e", "score", "", "m", true}, {"e", "score", "acme", "m", true},
		{"e", "score", "", "", false}, {"e", "score", "", "n", false}, {"m", "noul", "", "x", false},
	} {
		if got := r.Alarmed(c.model, c.typ, c.org, c.from); got != c.want {
			t.Errorf("Alarmed(%q, %q, %q, %q) = %v, want %v", c.model, c.typ, c.org, c.from, got, c.want)
		}
	}

	// Lost without a reset (Redis lost its data): kept, and written back.
	if err := client.SRem(ctx, key, pooled.Member()).Err(); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the lost alarm written back", func() bool {
		ok, _ := client.SIsMember(ctx, key, pooled.Member()).Result()
		return ok
	})
	if !r.Alarmed("m", "noul", "", "") {
		t.Fatal("a lost alarm stopped holding")
	}

	// Reset: gone from the set with a new token.
	if _, err := client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SRem(ctx, key, pooled.Member())
		p.HSet(ctx, resets, pooled.Member(), "token-1")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the reset group cleared", func() bool { return !r.Alarmed("m", "noul", "", "") })
	if ok, _ := client.SIsMember(ctx, key, pooled.Member()).Result(); ok {
		t.Fatal("a reset alarm was written back")
	}
}

// A watch whose Redis never answers reports the alarms unknown.
func TestWatchUnknownWhileUnreadable(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	w := Start(client, "gw:", "s", time.Hour, nil, nil)
	t.Cleanup(w.Close)
	if w.Known() || w.Alarmed("m", "noul", "", "") {
		t.Fatalf("unreadable: Known %v, Alarmed %v", w.Known(), w.Alarmed("m", "noul", "", ""))
	}
}
