package headerset

import (
	"net/http"
	"reflect"
	"testing"
)

// The fields reach the header in order, the last of a name winning, a
// deletion removing what was there; a second write adds what came since
// without touching the values the header already holds; past the inline
// room the values still arrive.
func TestWriteTo(t *testing.T) {
	h := http.Header{"X-Old": {"old"}, "X-Gone": {"upstream"}}
	var s Set
	s.Add("X-A", "a")
	s.AddInt("X-N", -42)
	s.AddBytes("X-B", []byte("bytes"))
	s.Del("X-Gone")
	s.Add("X-A", "again")
	s.WriteTo(h)
	want := http.Header{"X-Old": {"old"}, "X-A": {"again"}, "X-N": {"-42"}, "X-B": {"bytes"}}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("header %v, want %v", h, want)
	}
	first := h["X-N"]
	s.Add("X-C", "c")
	s.WriteTo(h)
	if h.Get("X-C") != "c" || first[0] != "-42" || h.Get("X-N") != "-42" {
		t.Fatalf("after a second write: %v (the first value %q)", h, first[0])
	}
	// An Add of one value never grows another's slice: each has no room.
	if cap(h["X-A"]) != 1 {
		t.Fatalf("a value slice with room %d", cap(h["X-A"]))
	}
	for i := range 40 {
		s.AddInt("X-Many-"+string(rune('A'+i%26))+string(rune('a'+i/26)), int64(i))
	}
	s.WriteTo(h)
	if h.Get("X-Many-Nb") != "39" || h.Get("X-Many-Aa") != "0" {
		t.Fatalf("past the inline room: %v", h)
	}
	if s.Len() != 0 {
		t.Fatalf("%d fields left after WriteTo", s.Len())
	}
}

// A set inside a longer-lived value writes its fields with one allocation
// (the values' string).
func TestWriteToAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops buffers at random")
	}
	h := http.Header{}
	s := new(Set)
	allocs := testing.AllocsPerRun(100, func() {
		*s = Set{}
		clear(h)
		s.AddInt("X-Ratelimit-Limit-Requests", 300)
		s.AddInt("X-Ratelimit-Remaining-Requests", 299)
		s.Add("X-Route", "auto")
		s.Add("X-Route-Reason", "confident")
		s.WriteTo(h)
	})
	if allocs > 1 {
		t.Fatalf("%.1f allocations for four fields, want 1", allocs)
	}
}
