// Package headerset gathers the header fields the gateway adds to one
// response and writes them at once: every value's bytes in one string and
// every value's slice in one backing array, where setting each field on
// its own costs a string and a slice per field. Names must be canonical
// (as net/http writes them): they are written as they are.
package headerset

import (
	"net/http"
	"strconv"
)

// inline is how many fields a Set holds without allocating: a response's
// rate-limit, budget, route, guardrails and cache fields.
const inline = 12

// Set is the fields of one response, in the order given; a name given twice
// takes the last. The zero Set is empty and ready. It may be written more
// than once (WriteTo writes what was added since): the values already in a
// header are never changed, since the header keeps slices of the Set.
type Set struct {
	text    []byte
	textBuf [128]byte
	fields  []field
	inl     [inline]field
	values  [inline]string // the values' backing array
	used    int            // values given to a header
	written int            // fields and text written: text[:textAt], fields[:written]
	textAt  int
}

type field struct {
	name       string
	start, end int32 // of the value in text
	del        bool  // remove the field
}

func (s *Set) add(f field) {
	s.begin()
	s.fields = append(s.fields, f)
}

// Add sets name to value.
func (s *Set) Add(name, value string) {
	start := s.begin()
	s.text = append(s.text, value...)
	s.add(field{name: name, start: int32(start), end: int32(len(s.text))})
}

// AddBytes sets name to the bytes of value.
func (s *Set) AddBytes(name string, value []byte) {
	start := s.begin()
	s.text = append(s.text, value...)
	s.add(field{name: name, start: int32(start), end: int32(len(s.text))})
}

// AddInt sets name to the decimal digits of n.
func (s *Set) AddInt(name string, n int64) {
	start := s.begin()
	s.text = strconv.AppendInt(s.text, n, 10)
	s.add(field{name: name, start: int32(start), end: int32(len(s.text))})
}

// Del removes name from the header.
func (s *Set) Del(name string) { s.add(field{name: name, del: true}) }

// begin is where the next value starts in text.
func (s *Set) begin() int {
	if s.fields == nil {
		s.fields = s.inl[:0]
		s.text = s.textBuf[:0]
	}
	return len(s.text)
}

// Len is the number of fields added and not written yet.
func (s *Set) Len() int { return len(s.fields) - s.written }

// WriteTo sets (or removes) in h the fields added since the last WriteTo,
// in order: one string for their values, their slices in the Set's own
// backing array while it has room.
func (s *Set) WriteTo(h http.Header) {
	if s.Len() == 0 {
		return
	}
	text := string(s.text[s.textAt:])
	base := s.textAt
	for _, f := range s.fields[s.written:] {
		if f.del {
			delete(h, f.name)
			continue
		}
		v := text[int(f.start)-base : int(f.end)-base]
		if s.used < len(s.values) {
			s.values[s.used] = v
			h[f.name] = s.values[s.used : s.used+1 : s.used+1]
			s.used++
			continue
		}
		h[f.name] = []string{v}
	}
	s.written, s.textAt = len(s.fields), len(s.text)
}
