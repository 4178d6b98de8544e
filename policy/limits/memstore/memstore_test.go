package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/policy/limits/store"
)

// The janitor forgets the organizations whose buckets are full again, and
// only those.
func TestForgetsFullBuckets(t *testing.T) {
	s := New()
	t.Cleanup(func() { _ = s.Close() })
	req, tok := store.RequestsPerMinute(300), store.TokensPerSecond(1000, 64_000)
	admit := func(org string, tokens int64, at time.Time) store.Outcome {
		o, _ := s.Admit(context.Background(), org, store.Check{Req: req, Tok: tok, ReqCost: store.Unit, TokCost: tokens * store.Unit, Hold: true}, 0, at)
		return o
	}
	at := time.Now()
	for i := range 5000 {
		admit("org"+strconv.Itoa(i), 1, at)
	}
	at = at.Add(30 * time.Second)
	admit("acme", 64000, at)      // full again in 64s
	at = at.Add(35 * time.Second) // every other bucket is full again
	s.sweep(store.Micros(at))
	n := 0
	for i := range s.shards {
		n += len(s.shards[i].orgs)
	}
	if n != 1 {
		t.Fatalf("%d organizations held after their buckets filled up, want 1 (acme)", n)
	}
	if o := admit("acme", 0, at); o.Tok/store.Unit != 35000 {
		t.Fatalf("acme was forgotten while in use: %d tokens left", o.Tok/store.Unit)
	}
}
