// Package headerset gathers the header fields the gateway adds to one
// response and writes them at once: every value's bytes in one string and
// every value's slice in one backing array, where setting each field on
// its own costs a string and a slice per field. Names must be canonical
// (as net/http writes them): they are written as they are.
package headerset

import (
	"net/http"
	"strconv"
	"sync"
)

// Inline is how many fields a Set writes into its own backing array:
// a response's rate-limit, route and guardrails fields. Past it, WriteTo
// allocates the backing array of the rest.
const Inline = 10

// Set is the fields of one response, in the order given; a name given twice
// takes the last. The zero Set is empty and ready. It may be written more
// than once (WriteTo writes what was added since): the values already in a
// header are never changed, since the header keeps slices of the Set's
// backing array. The fields' names and bytes wait in a pooled scratch
// buffer until WriteTo, so a Set inside a longer-lived value (an exchange)
// adds only its backing array to it.
type Set struct {
	values [Inline]string // the backing array
	used   int            // values given to a header
	s      *scratch       // from scratches while fields wait to be written
}

// scratch is what waits to be written: names and value bounds, and the
// values' bytes.
type scratch struct {
	fields []field
	text   []byte
}

var scratches = sync.Pool{New: func() any { return &scratch{fields: make([]field, 0, 16), text: make([]byte, 0, 256)} }}

type field struct {
	name       string
	start, end int32 // of the value in text
	del        bool  // remove the field
}

// pending is the scratch buffer, taken from the pool when the first field
// of a write is added.
func (s *Set) pending() *scratch {
	if s.s == nil {
		s.s = scratches.Get().(*scratch)
	}
	return s.s
}

// Add sets name to value.
func (s *Set) Add(name, value string) {
	p := s.pending()
	start := len(p.text)
	p.text = append(p.text, value...)
	p.fields = append(p.fields, field{name: name, start: int32(start), end: int32(len(p.text))})
}

// AddBytes sets name to the bytes of value.
func (s *Set) AddBytes(name string, value []byte) {
	p := s.pending()
	start := len(p.text)
	p.text = append(p.text, value...)
	p.fields = append(p.fields, field{name: name, start: int32(start), end: int32(len(p.text))})
}

// AddInt sets name to the decimal digits of n.
func (s *Set) AddInt(name string, n int64) {
	p := s.pending()
	start := len(p.text)
	p.text = strconv.AppendInt(p.text, n, 10)
	p.fields = append(p.fields, field{name: name, start: int32(start), end: int32(len(p.text))})
}

// Del removes name from the header.
func (s *Set) Del(name string) {
	p := s.pending()
	p.fields = append(p.fields, field{name: name, del: true})
}

// Len is the number of fields added and not written yet.
func (s *Set) Len() int {
	if s.s == nil {
		return 0
	}
	return len(s.s.fields)
}

// WriteTo sets (or removes) in h the fields added since the last WriteTo,
// in order: one string for their values, their slices in the Set's own
// backing array while it has room.
func (s *Set) WriteTo(h http.Header) {
	p := s.s
	if p == nil {
		return
	}
	s.s = nil
	defer func() {
		p.fields, p.text = p.fields[:0], p.text[:0]
		clear(p.fields[:cap(p.fields)]) // the names
		scratches.Put(p)
	}()
	text := string(p.text)
	var more []string // the backing array past Inline
	for _, f := range p.fields {
		if f.del {
			delete(h, f.name)
			continue
		}
		v := text[f.start:f.end]
		if s.used < len(s.values) {
			s.values[s.used] = v
			h[f.name] = s.values[s.used : s.used+1 : s.used+1]
			s.used++
			continue
		}
		if more == nil {
			more = make([]string, 0, len(p.fields))
		}
		more = append(more, v)
		h[f.name] = more[len(more)-1 : len(more) : len(more)]
	}
}
