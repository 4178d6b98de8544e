package evaluation

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// pyStr returns Python's str() of a scanned JSON value, as pydantic writes a
// question type that matches no tag into its message: a string as itself,
// anything else as repr() of what json.loads makes of it (None, True, 0,
// 1000.0, inf, ['a'], {'k': 1}). Only an invalid request gets here.
func (s *scanner) pyStr(sp span) string {
	if sp.kind == kindString {
		return s.text(sp)
	}
	w := scanner{b: s.b, pos: sp.start}
	var out strings.Builder
	w.pyValue().write(&out)
	return out.String()
}

// pyValue is a decoded value, enough to write its repr() or its JSON.
type pyValue struct {
	repr  string     // a scalar's repr
	raw   []byte     // a scalar's JSON, as sent
	keys  []string   // an object's keys, a repeated one in its first place
	items []*pyValue // an array's items, or an object's values (a repeated key's last)
	kind  byte
}

// pyValue reads the value at s.pos, which the scanner has accepted, in one
// pass: deep nesting costs no rescans.
func (s *scanner) pyValue() *pyValue {
	s.skipSpace()
	switch s.b[s.pos] {
	case '[':
		v := &pyValue{kind: kindArray}
		s.pos++
		for s.skipSpace(); s.b[s.pos] != ']'; s.skipSpace() {
			v.items = append(v.items, s.pyValue())
			if s.skipSpace(); s.b[s.pos] == ',' {
				s.pos++
			}
		}
		s.pos++
		return v
	case '{':
		v := &pyValue{kind: kindObject}
		index := map[string]int{}
		s.pos++
		for s.skipSpace(); s.b[s.pos] != '}'; s.skipSpace() {
			key := span{kind: kindString, start: s.pos}
			key.escaped = s.str()
			key.end = s.pos
			s.skipSpace()
			s.pos++ // ':'
			item, k := s.pyValue(), s.text(key)
			if at, ok := index[k]; ok {
				v.items[at] = item
			} else {
				index[k] = len(v.keys)
				v.keys = append(v.keys, k)
				v.items = append(v.items, item)
			}
			if s.skipSpace(); s.b[s.pos] == ',' {
				s.pos++
			}
		}
		s.pos++
		return v
	}
	sp := s.value(nil)
	v := &pyValue{kind: sp.kind, raw: raw(s.b, sp)}
	switch text := string(v.raw); sp.kind {
	case kindString:
		v.repr = pyReprString(s.text(sp))
	case kindNull:
		v.repr = "None"
	case kindBool:
		v.repr = strings.ToUpper(text[:1]) + text[1:]
	default:
		v.repr = pyNumber(text)
	}
	return v
}

// echo returns the JSON of the value Python decodes from b, which holds NaN
// or Infinity somewhere: compact, a repeated key collapsed into its first
// place and last value. It returns null when NaN or Infinity remains, which
// the upstream's JSON encoder cannot write (the contract writes null).
func echo(b []byte) []byte {
	s := scanner{b: b}
	v := s.pyValue()
	if v.nonFinite() {
		return []byte("null")
	}
	return v.appendJSON(nil)
}

func (v *pyValue) nonFinite() bool {
	for _, item := range v.items {
		if item.nonFinite() {
			return true
		}
	}
	switch string(v.raw) {
	case "NaN", "Infinity", "-Infinity":
		return true
	}
	return false
}

func (v *pyValue) appendJSON(dst []byte) []byte {
	switch v.kind {
	case kindArray:
		dst = append(dst, '[')
		for i, item := range v.items {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = item.appendJSON(dst)
		}
		return append(dst, ']')
	case kindObject:
		dst = append(dst, '{')
		for i, key := range v.keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(append(dst, quote(key)...), ':')
			dst = v.items[i].appendJSON(dst)
		}
		return append(dst, '}')
	}
	return append(dst, v.raw...)
}

func (v *pyValue) write(out *strings.Builder) {
	switch v.kind {
	case kindArray:
		out.WriteByte('[')
		for i, item := range v.items {
			if i > 0 {
				out.WriteString(", ")
			}
			item.write(out)
		}
		out.WriteByte(']')
	case kindObject:
		out.WriteByte('{')
		for i, key := range v.keys {
			if i > 0 {
				out.WriteString(", ")
			}
			out.WriteString(pyReprString(key))
			out.WriteString(": ")
			v.items[i].write(out)
		}
		out.WriteByte('}')
	default:
		out.WriteString(v.repr)
	}
}

// pyNumber is str() of a JSON number as Python reads it: NaN and the
// infinities as nan, inf and -inf; an int when the text has no fraction or
// exponent; otherwise a float, written as repr() writes one (the shortest
// digits that read back, positional for decimal exponents -4 to 15 with
// ".0" when whole, scientific otherwise).
func pyNumber(text string) string {
	switch text {
	case "NaN":
		return "nan"
	case "Infinity":
		return "inf"
	case "-Infinity":
		return "-inf"
	}
	if !strings.ContainsAny(text, ".eE") {
		if strings.Trim(text, "-0") == "" {
			return "0"
		}
		return text
	}
	f, _ := strconv.ParseFloat(text, 64) // out of range gives ±Inf, as float() does
	if math.IsInf(f, 0) {
		return map[bool]string{true: "inf", false: "-inf"}[f > 0]
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64)
	if exp, _ := strconv.Atoi(sci[strings.IndexByte(sci, 'e')+1:]); exp < -4 || exp >= 16 {
		return sci
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// pyReprString is repr() of a str: single quotes unless the text holds a
// single quote and no double one; backslash escapes for that quote, the
// backslash, \t \n \r and every character Python does not print.
func pyReprString(s string) string {
	quote := '\''
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		quote = '"'
	}
	var b strings.Builder
	b.WriteRune(quote)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 && isEncodedSurrogate([]byte(s[i:])) {
			size = 3 // one character to Python, written as U+FFFD here
		}
		i += size
		switch {
		case r == quote || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r >= 0x20 && r < 0x7F, r >= 0x80 && unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xFF:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xFFFF:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteRune(quote)
	return b.String()
}

// replaceSurrogates returns b with each UTF-8-encoded surrogate, which
// Python reads as one character and Go as three invalid bytes, replaced by
// U+FFFD (three bytes too), so text written back shows one character.
func replaceSurrogates(b []byte) []byte {
	if utf8.Valid(b) {
		return b
	}
	out := bytes.Clone(b)
	for i := 0; i+2 < len(out); i++ {
		if isEncodedSurrogate(out[i:]) {
			copy(out[i:], "\uFFFD")
			i += 2
		}
	}
	return out
}
