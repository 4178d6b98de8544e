package memstore

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// At most maxEntries live, the least recently used go first, and an entry
// is answered for exactly ttl after it was set.
func TestBoundedLRUWithTTL(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	s := New(3, 10*time.Minute, func() time.Time { return now })
	for i := range 3 {
		s.Set(ctx, fmt.Sprint(i), []byte{byte(i)})
	}
	if _, ok := s.Get(ctx, "0"); !ok { // 0 is now the most recently used
		t.Fatal("0 missing")
	}
	s.Set(ctx, "3", []byte{3})
	if s.Len() != 3 {
		t.Fatalf("%d entries, want 3", s.Len())
	}
	if _, ok := s.Get(ctx, "1"); ok {
		t.Error("1, the least recently used, was kept")
	}
	for _, k := range []string{"0", "2", "3"} {
		if _, ok := s.Get(ctx, k); !ok {
			t.Errorf("%s evicted", k)
		}
	}

	now = now.Add(10*time.Minute - time.Nanosecond)
	if v, ok := s.Get(ctx, "3"); !ok || v[0] != 3 {
		t.Error("expired before its ttl")
	}
	s.Set(ctx, "0", []byte{9}) // set again: a new ttl
	now = now.Add(time.Nanosecond)
	if _, ok := s.Get(ctx, "3"); ok {
		t.Error("answered at its ttl")
	}
	if v, ok := s.Get(ctx, "0"); !ok || v[0] != 9 {
		t.Errorf("the entry set again: %v %v", v, ok)
	}
	if s.Len() != 2 {
		t.Errorf("%d entries after an expired one was read, want 2", s.Len())
	}
}

// The configs that acquire a name share one store; it is dropped when the
// last lets go, and a release counts once however often it is called.
func TestAcquireSharesByName(t *testing.T) {
	ctx := context.Background()
	a, releaseA := Acquire(t.Name(), 10, time.Minute)
	b, releaseB := Acquire(t.Name(), 10, time.Minute)
	if a != b {
		t.Fatal("two stores for one name")
	}
	a.Set(ctx, "k", []byte("v"))
	_ = releaseA()
	_ = releaseA()
	if _, ok := b.Get(ctx, "k"); !ok {
		t.Fatal("a store still held lost its entries")
	}
	_ = releaseB()
	if b.Len() != 0 {
		t.Error("the last release kept the entries")
	}
	c, releaseC := Acquire(t.Name(), 10, time.Minute)
	defer releaseC()
	if c == b {
		t.Error("a released store was handed out again")
	}
}
