package guardrails

import (
	"bytes"
	"errors"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/systemone/systemone-gateway/evaluation"
)

// Roles the guardrails service knows.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Message is one entry of the guardrails request's `messages`.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Messages turns the raw JSON of an evaluation request's `state` into the
// messages the guardrails service checks:
//
//   - a string is one user message holding the string's text (unescaped);
//   - a non-empty array of objects that each have exactly a string `role` and
//     a string `content` is the conversation, in order; so is an object whose
//     only field is `messages` holding such an array;
//   - anything else is one user message holding the state as compact JSON,
//     with its strings unescaped so that the service reads the same text the
//     evaluation model does (\u escapes cannot hide words from it).
//
// A conversation is recognised only when nothing would be left out: an
// entry or a wrapper with any other field (or a duplicated one) is sent as
// JSON instead, so no text the evaluation model sees escapes the check.
// Roles other than assistant are sent as user, the only other role the
// service knows: whatever a system or tool entry says is input to the model.
//
// The error reports state that is not a single JSON value.
func Messages(state []byte) ([]Message, error) {
	// Validity is checked once, here: the walk below relies on it. The
	// upstream's JSON (NaN and Infinity included) is what passed the edge.
	if !evaluation.Valid(state) {
		return nil, errors.New("state is not valid JSON")
	}
	state = bytes.TrimSpace(state)
	switch state[0] {
	case '"':
		return []Message{{Role: RoleUser, Content: unquote(state)}}, nil
	case '[':
		if msgs, ok := conversation(state); ok {
			return msgs, nil
		}
	case '{':
		if inner, ok := messagesField(state); ok {
			if msgs, ok := conversation(inner); ok {
				return msgs, nil
			}
		}
	}
	return []Message{{Role: RoleUser, Content: string(compact(state))}}, nil
}

// The functions below walk JSON that json.Valid accepted, so they do not
// check its syntax again; they still never index out of range (at returns 0
// past the end) and every loop advances.

// conversation returns the messages of a JSON array of {role, content}
// objects, or false when b is not exactly that.
func conversation(b []byte) ([]Message, bool) {
	i := skipSpace(b, 1) // past '['
	if at(b, i) == ']' {
		return nil, false
	}
	var msgs []Message
	for {
		m, next, ok := message(b, skipSpace(b, i))
		if !ok {
			return nil, false
		}
		msgs = append(msgs, m)
		i = skipSpace(b, next)
		switch at(b, i) {
		case ',':
			i++
		case ']':
			return msgs, true
		default:
			return nil, false
		}
	}
}

// message reads the object at b[i] when its fields are exactly a string
// role and a string content, and returns the index after it.
func message(b []byte, i int) (Message, int, bool) {
	if at(b, i) != '{' {
		return Message{}, 0, false
	}
	m := Message{Role: RoleUser}
	var haveRole, haveContent bool
	for i++; ; {
		i = skipSpace(b, i)
		if at(b, i) == '}' {
			return m, i + 1, haveRole && haveContent
		}
		if haveRole || haveContent {
			if at(b, i) != ',' {
				return Message{}, 0, false
			}
			i = skipSpace(b, i+1)
		}
		key, value, next, ok := stringField(b, i)
		if !ok {
			return Message{}, 0, false
		}
		switch {
		case stringIs(key, "role") && !haveRole:
			if stringIs(value, RoleAssistant) {
				m.Role = RoleAssistant
			}
			haveRole = true
		case stringIs(key, "content") && !haveContent:
			m.Content, haveContent = unquote(value), true
		default: // another field, or one named twice
			return Message{}, 0, false
		}
		i = next
	}
}

// stringField reads `"key": "value"` at b[i], both as raw JSON strings.
func stringField(b []byte, i int) (key, value []byte, next int, ok bool) {
	if at(b, i) != '"' {
		return nil, nil, 0, false
	}
	end := stringEnd(b, i)
	key = b[i:end]
	i = skipSpace(b, end)
	if at(b, i) != ':' {
		return nil, nil, 0, false
	}
	i = skipSpace(b, i+1)
	if at(b, i) != '"' {
		return nil, nil, 0, false
	}
	end = stringEnd(b, i)
	return key, b[i:end], end, true
}

// stringIs reports whether the JSON string s says text, without allocating in
// the usual case of a string written plainly.
func stringIs(s []byte, text string) bool {
	if plain(s) {
		return len(s) == len(text)+2 && string(s[1:len(s)-1]) == text
	}
	return unquote(s) == text
}

// messagesField returns the value of an object's `messages` field when that
// is its only field.
func messagesField(b []byte) ([]byte, bool) {
	i := skipSpace(b, 1) // past '{'
	if at(b, i) != '"' {
		return nil, false
	}
	end := stringEnd(b, i)
	if !stringIs(b[i:end], "messages") {
		return nil, false
	}
	i = skipSpace(b, end)
	if at(b, i) != ':' {
		return nil, false
	}
	start := skipSpace(b, i+1)
	end = valueEnd(b, start)
	if at(b, skipSpace(b, end)) != '}' {
		return nil, false
	}
	return b[start:end], true
}

// compact returns b without insignificant space and with its strings
// unescaped (only what JSON requires is escaped); keys keep their order and
// numbers their text.
func compact(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		switch c := b[i]; c {
		case ' ', '\t', '\r', '\n':
			i++
		case '"':
			end := stringEnd(b, i)
			if s := b[i:end]; plain(s) {
				out = append(out, s...)
			} else {
				out = appendQuoted(out, unquote(s))
			}
			i = end
		default:
			out = append(out, c)
			i++
		}
	}
	return out
}

// plain reports whether the JSON string s (quoted or not) needs no
// unescaping: no escapes, valid UTF-8 (the decoder turns invalid bytes into
// U+FFFD).
func plain(s []byte) bool {
	return bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s)
}

// unquote returns the text of the JSON string s, decoded as encoding/json
// does: a bad surrogate or an invalid UTF-8 byte becomes U+FFFD.
func unquote(s []byte) string {
	if len(s) < 2 {
		return ""
	}
	s = s[1 : len(s)-1]
	if plain(s) {
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
			r, next := unescape(s, 0)
			out.WriteRune(r)
			s = s[next:]
		case len(s) == 1: // a backslash at the very end
			out.WriteByte(s[0])
			s = nil
		}
	}
	return out.String()
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
			return utf8.RuneError, i + 2
		}
		if utf16.IsSurrogate(r) {
			// A pair is two escapes; anything else leaves the first alone
			// as U+FFFD and the second to be read on its own.
			if at(s, i+6) == '\\' && at(s, i+7) == 'u' {
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
		for i < len(b) && bytes.IndexByte([]byte(",]} \t\r\n"), b[i]) < 0 {
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
	if i < len(b) {
		return b[i]
	}
	return 0
}

// appendQuoted appends s as a JSON string, escaping only the quote, the
// backslash and control characters.
func appendQuoted(out []byte, s string) []byte {
	const hex = "0123456789abcdef"
	out = append(out, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			out = append(out, '\\', c)
		case c == '\n':
			out = append(out, '\\', 'n')
		case c == '\r':
			out = append(out, '\\', 'r')
		case c == '\t':
			out = append(out, '\\', 't')
		case c < 0x20:
			out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		case c < utf8.RuneSelf:
			out = append(out, c)
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			out = utf8.AppendRune(out, r) // invalid bytes become U+FFFD
			i += size
			continue
		}
		i++
	}
	return append(out, '"')
}
