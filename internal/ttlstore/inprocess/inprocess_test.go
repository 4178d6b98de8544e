package inprocess

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/ttlstore"
)

func set(s *Store, key string, value []byte) {
	s.Set(context.Background(), ttlstore.Entry{Key: key, Value: value})
}

func get(s *Store, key string) ([]byte, bool) {
	v := s.Get(context.Background(), key)[0]
	return v, v != nil
}

// At most Entries live, the least recently used go first, and an entry
// is answered for exactly ttl after it was set.
func TestBoundedLRUWithTTL(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := New(Limits{Entries: 3, TTL: 10 * time.Minute}, func() time.Time { return now })
	for i := range 3 {
		set(s, fmt.Sprint(i), []byte{byte(i)})
	}
	if _, ok := get(s, "0"); !ok { // 0 is now the most recently used
		t.Fatal("0 missing")
	}
	set(s, "3", []byte{3})
	if s.Len() != 3 {
		t.Fatalf("%d entries, want 3", s.Len())
	}
	if _, ok := get(s, "1"); ok {
		t.Error("1, the least recently used, was kept")
	}
	for _, k := range []string{"0", "2", "3"} {
		if _, ok := get(s, k); !ok {
			t.Errorf("%s evicted", k)
		}
	}

	now = now.Add(10*time.Minute - time.Nanosecond)
	if v, ok := get(s, "3"); !ok || v[0] != 3 {
		t.Error("expired before its ttl")
	}
	set(s, "0", []byte{9}) // set again: a new ttl
	now = now.Add(time.Nanosecond)
	if _, ok := get(s, "3"); ok {
		t.Error("answered at its ttl")
	}
	if v, ok := get(s, "0"); !ok || v[0] != 9 {
		t.Errorf("the entry set again: %v %v", v, ok)
	}
	if s.Len() != 2 {
		t.Errorf("%d entries after an expired one was read, want 2", s.Len())
	}
}

// Several keys are read and written in one call, in order; Delete removes.
func TestManyKeysAtOnce(t *testing.T) {
	s := New(Limits{Entries: 10, TTL: time.Minute}, time.Now)
	s.Set(context.Background(), ttlstore.Entry{Key: "a", Value: []byte("1")}, ttlstore.Entry{Key: "b", Value: []byte("2")})
	got := s.Get(context.Background(), "b", "missing", "a")
	if string(got[0]) != "2" || got[1] != nil || string(got[2]) != "1" {
		t.Fatalf("Get = %q", got)
	}
	s.Delete(context.Background(), "a", "missing")
	if _, ok := get(s, "a"); ok || s.Len() != 1 {
		t.Errorf("after Delete: a held %v, %d entries", ok, s.Len())
	}
}

// With a byte bound, the least recently used go until the entries fit, a
// value over the bound is not stored at all, and a replaced or removed
// entry gives its bytes back.
func TestBoundedInBytes(t *testing.T) {
	value := []byte(strings.Repeat("x", 1000))
	per := len("k0") + len(value) + entryOverhead
	s := New(Limits{Entries: 100, Bytes: 3 * per, TTL: time.Minute}, time.Now)
	for i := range 5 {
		set(s, fmt.Sprintf("k%d", i), value)
	}
	if s.Len() != 3 || s.Bytes() != 3*per {
		t.Fatalf("%d entries of %d bytes, want 3 of %d", s.Len(), s.Bytes(), 3*per)
	}
	if _, ok := get(s, "k1"); ok {
		t.Error("k1, past the bound, was kept")
	}
	set(s, "huge", make([]byte, 3*per))
	if _, ok := get(s, "huge"); ok || s.Len() != 3 {
		t.Errorf("a value over the bound: stored %v, %d entries left", ok, s.Len())
	}
	s.Delete(context.Background(), "k4")
	set(s, "k3", []byte("small"))
	if want := per - len(value) + len("small") + per; s.Bytes() != want || s.Len() != 2 {
		t.Errorf("%d bytes in %d entries, want %d in 2", s.Bytes(), s.Len(), want)
	}
}

// The configs that acquire a name share one store; it is dropped when the
// last lets go, and a release counts once however often it is called.
func TestAcquireSharesByName(t *testing.T) {
	limits := Limits{Entries: 10, TTL: time.Minute}
	a, releaseA := Acquire(t.Name(), limits)
	b, releaseB := Acquire(t.Name(), limits)
	if a != b {
		t.Fatal("two stores for one name")
	}
	set(a, "k", []byte("v"))
	_ = releaseA()
	_ = releaseA()
	if _, ok := get(b, "k"); !ok {
		t.Fatal("a store still held lost its entries")
	}
	_ = releaseB()
	if b.Len() != 0 || b.Bytes() != 0 {
		t.Error("the last release kept the entries")
	}
	c, releaseC := Acquire(t.Name(), limits)
	defer releaseC()
	if c == b {
		t.Error("a released store was handed out again")
	}
}
