package simulator

import (
	"encoding/json"
	"errors"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The functions in this file walk JSON that evaluation.ParseRequest accepted
// (and standardJSON rewrote), in one pass and without decoding what they
// skip: encoding/json's Decoder reads a 256 KiB state one byte at a time
// through its state machine, which made the simulator, not the gateway, the
// bottleneck of every benchmark. They read the same keys, values and
// characters encoding/json does; simulator_test.go checks them against it.
// On JSON they were not meant for they return an error or a wrong count,
// never panic.

var errNotObject = errors.New("not a JSON object")

// member is one member of a JSON object.
type member struct {
	key   string
	value json.RawMessage
}

// members returns a JSON object's members in order. A repeated key keeps its
// first position and its last value, as Python's json does.
func members(raw json.RawMessage) ([]member, error) {
	i := skipSpace(raw, 0)
	if at(raw, i) != '{' {
		return nil, errNotObject
	}
	var ms []member
	var index map[string]int
	i = skipSpace(raw, i+1)
	if at(raw, i) == '}' {
		return ms, nil
	}
	for {
		if at(raw, i) != '"' {
			return nil, errNotObject
		}
		end := stringEnd(raw, i)
		key, err := decodeString(raw[i:end])
		if err != nil {
			return nil, err
		}
		i = skipSpace(raw, end)
		if at(raw, i) != ':' {
			return nil, errNotObject
		}
		start := skipSpace(raw, i+1)
		end = valueEnd(raw, start)
		if end <= start {
			return nil, errNotObject
		}
		value := json.RawMessage(raw[start:end])
		if index == nil && len(ms) >= 8 {
			index = make(map[string]int)
			for j, m := range ms {
				index[m.key] = j
			}
		}
		if j, ok := find(ms, index, key); ok {
			ms[j].value = value
		} else {
			if index != nil {
				index[key] = len(ms)
			}
			ms = append(ms, member{key, value})
		}
		i = skipSpace(raw, end)
		switch at(raw, i) {
		case ',':
			i = skipSpace(raw, i+1)
		case '}':
			return ms, nil
		default:
			return nil, errNotObject
		}
	}
}

func find(ms []member, index map[string]int, key string) (int, bool) {
	if index != nil {
		j, ok := index[key]
		return j, ok
	}
	for j, m := range ms {
		if m.key == key {
			return j, true
		}
	}
	return 0, false
}

// decodeString returns the text of the JSON string s (quotes included), as
// encoding/json decodes it.
func decodeString(s []byte) (string, error) {
	inner := s[1 : len(s)-1]
	if plainString(inner) {
		return string(inner), nil
	}
	var out string
	err := json.Unmarshal(s, &out)
	return out, err
}

// plainString reports a string's inside that decodes to itself: no escape,
// no control byte, valid UTF-8.
func plainString(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c < ' ' {
			return false
		}
	}
	return utf8.Valid(b)
}

// countTokens counts the tokens of a JSON value: the text of every string,
// object key (so choice option keys count), number and boolean, read by
// textTokens. Structure and null are free, so "instructions": null costs
// nothing.
func countTokens(value json.RawMessage) int64 {
	var n int64
	for i := 0; i < len(value); {
		switch c := value[i]; {
		case c == '"':
			end := stringEnd(value, i)
			n += stringTokens(value[i+1 : max(end-1, i+1)])
			i = end
		case c == '-' || c >= '0' && c <= '9':
			end := valueEnd(value, i)
			n += textTokens(string(value[i:end]))
			i = end
		case c == 't' || c == 'f':
			n++
			i = valueEnd(value, i)
		default: // structure, white space, null
			i++
		}
	}
	return n
}

// stringTokens counts the tokens of a JSON string's inside, escapes and
// invalid UTF-8 decoded as encoding/json decodes them.
func stringTokens(s []byte) int64 {
	var t tokenizer
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			var r rune
			r, i = unescape(s, i)
			t.add(r)
		case c < utf8.RuneSelf:
			t.addASCII(c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			t.add(r) // an invalid byte is U+FFFD, as decoded
			i += size
		}
	}
	return t.done()
}

// unescape decodes the escape at s[i] and returns the index after it.
func unescape(s []byte, i int) (rune, int) {
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
			return utf8.RuneError, len(s)
		}
		if utf16.IsSurrogate(r) {
			if at(s, i+6) == '\\' && at(s, i+7) == 'u' {
				if dec := utf16.DecodeRune(r, hex4(s, i+8)); dec != unicode.ReplacementChar {
					return dec, i + 12
				}
			}
			return unicode.ReplacementChar, i + 6
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

// stringEnd returns the index after the string that starts at b[i].
func stringEnd(b []byte, i int) int {
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

// valueEnd returns the index after the value that starts at b[i].
func valueEnd(b []byte, i int) int {
	switch at(b, i) {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = stringEnd(b, i)
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
		for i < len(b) {
			switch b[i] {
			case ',', ']', '}', ' ', '\t', '\r', '\n':
				return i
			}
			i++
		}
		return i
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// at returns b[i], or 0 past the end.
func at(b []byte, i int) byte {
	if i >= 0 && i < len(b) {
		return b[i]
	}
	return 0
}
