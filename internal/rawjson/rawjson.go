// Package rawjson reads JSON that a validating scanner has already
// accepted, in place and without allocating where it can: where a value
// ends, what a string says. It does not check syntax again; it never
// indexes out of range (At returns 0 past the end) and every loop advances,
// so malformed input gives a wrong answer, never a panic.
package rawjson

import (
	"bytes"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Plain reports whether the JSON string s (quoted or not) needs no
// unescaping: no escapes, valid UTF-8 (the decoder turns invalid bytes into
// U+FFFD).
func Plain(s []byte) bool {
	return bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s)
}

// Unquote returns the text of the JSON string s, decoded as encoding/json
// does: a bad surrogate or an invalid UTF-8 byte becomes U+FFFD.
func Unquote(s []byte) string {
	if len(s) < 2 {
		return ""
	}
	s = s[1 : len(s)-1]
	if Plain(s) {
		return string(s)
	}
	var out strings.Builder
	out.Grow(len(s))
	for len(s) > 0 {
		// The text between two escapes is copied at once when it is valid
		// UTF-8, as it nearly always is, else character by character.
		run := s
		if i := bytes.IndexByte(s, '\\'); i >= 0 {
			run = s[:i]
		}
		if utf8.Valid(run) {
			out.Write(run)
		} else {
			for j := 0; j < len(run); {
				r, size := utf8.DecodeRune(run[j:])
				out.WriteRune(r)
				j += size
			}
		}
		switch s = s[len(run):]; {
		case len(s) >= 2:
			r, next := Unescape(s, 0)
			out.WriteRune(r)
			s = s[next:]
		case len(s) == 1: // a backslash at the very end
			out.WriteByte(s[0])
			s = nil
		}
	}
	return out.String()
}

// Unescape decodes the escape at s[i] (a backslash and what follows) and returns the index after it.
func Unescape(s []byte, i int) (rune, int) {
	switch c := s[i+1]; c {
	case 'b':
		return '\b', i + 2
	case 'f':
		return '\f', i + 2
	case 'n':
		return '\n', i + 2
	case 'r':
		return '\r', i + 2
	case 't':
		return '\t', i + 2
	case 'u':
		r := hex4(s, i+2)
		if r < 0 {
			return utf8.RuneError, i + 2
		}
		if utf16.IsSurrogate(r) {
			// A pair is two escapes; anything else leaves the first alone
			// as U+FFFD and the second to be read on its own.
			if At(s, i+6) == '\\' && At(s, i+7) == 'u' {
				if r2 := hex4(s, i+8); r2 >= 0 {
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						return dec, i + 12
					}
				}
			}
			return utf8.RuneError, i + 6
		}
		return r, i + 6
	default: // '"', '\\', '/'
		return rune(c), i + 2
	}
}

// hex4 returns the value of the four hex digits at s[i], or -1.
func hex4(s []byte, i int) rune {
	if i+4 > len(s) {
		return -1
	}
	var r rune
	for _, c := range s[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// StringEnd returns the index after the string that starts at b[i].
func StringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			i++ // the escaped byte is never the closing quote
		}
	}
	return len(b)
}

// ValueEnd returns the index after the value that starts at b[i].
func ValueEnd(b []byte, i int) int {
	switch At(b, i) {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = StringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	default: // number, true, false, null
		for i < len(b) && bytes.IndexByte([]byte(",]} \t\r\n"), b[i]) < 0 {
			i++
		}
		return i
	}
}

// SkipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// At returns b[i], or 0 past the end.
func At(b []byte, i int) byte {
	if i < len(b) {
		return b[i]
	}
	return 0
}

// Members calls fn with the raw key (quotes included) and the raw value of
// each member of the JSON object that starts at b[i] (after space), in
// order, until fn returns false. It reports whether b holds an object
// there that it could walk to its end (or to where fn stopped): false for
// anything else, with fn called for the members before the fault.
func Members(b []byte, i int, fn func(key, value []byte) bool) bool {
	i = SkipSpace(b, i)
	if At(b, i) != '{' {
		return false
	}
	i = SkipSpace(b, i+1)
	if At(b, i) == '}' {
		return true
	}
	for {
		if At(b, i) != '"' {
			return false
		}
		keyEnd := StringEnd(b, i)
		key := b[i:keyEnd]
		i = SkipSpace(b, keyEnd)
		if At(b, i) != ':' {
			return false
		}
		start := SkipSpace(b, i+1)
		end := ValueEnd(b, start)
		if end <= start {
			return false
		}
		if !fn(key, b[start:end]) {
			return true
		}
		i = SkipSpace(b, end)
		switch At(b, i) {
		case ',':
			i = SkipSpace(b, i+1)
		case '}':
			return true
		default:
			return false
		}
	}
}
