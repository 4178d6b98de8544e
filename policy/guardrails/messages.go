package guardrails

import (
	"bytes"
	"errors"
	"unicode/utf8"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/rawjson"
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
//     a string `content` is the conversation, in order;
//   - an object whose `messages` field holds such an array is that
//     conversation, preceded, when the object has other fields, by one user
//     message holding the compact JSON of the object without `messages`;
//   - anything else is one user message holding the state as compact JSON,
//     with its strings unescaped so that the service reads the same text the
//     evaluation model does (\u escapes cannot hide words from it).
//
// A conversation is recognised only when nothing would be left out: an
// entry with any other field (or a duplicated one), or a wrapper naming
// `messages` twice, is sent as JSON instead, so no text the evaluation model
// sees escapes the check.
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
		return []Message{{Role: RoleUser, Content: rawjson.Unquote(state)}}, nil
	case '[':
		if msgs, ok := conversation(state); ok {
			return msgs, nil
		}
	case '{':
		if inner, rest, ok := messagesField(state); ok {
			if msgs, ok := conversation(inner); ok {
				if rest == nil {
					return msgs, nil
				}
				// The other fields go first, as one user message, so that
				// nothing the evaluation model reads escapes the check.
				return append([]Message{{Role: RoleUser, Content: string(compact(rest))}}, msgs...), nil
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
	i := rawjson.SkipSpace(b, 1) // past '['
	if rawjson.At(b, i) == ']' {
		return nil, false
	}
	var msgs []Message
	for {
		m, next, ok := message(b, rawjson.SkipSpace(b, i))
		if !ok {
			return nil, false
		}
		msgs = append(msgs, m)
		i = rawjson.SkipSpace(b, next)
		switch rawjson.At(b, i) {
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
	if rawjson.At(b, i) != '{' {
		return Message{}, 0, false
	}
	m := Message{Role: RoleUser}
	var haveRole, haveContent bool
	for i++; ; {
		i = rawjson.SkipSpace(b, i)
		if rawjson.At(b, i) == '}' {
			return m, i + 1, haveRole && haveContent
		}
		if haveRole || haveContent {
			if rawjson.At(b, i) != ',' {
				return Message{}, 0, false
			}
			i = rawjson.SkipSpace(b, i+1)
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
			m.Content, haveContent = rawjson.Unquote(value), true
		default: // another field, or one named twice
			return Message{}, 0, false
		}
		i = next
	}
}

// stringField reads `"key": "value"` at b[i], both as raw JSON strings.
func stringField(b []byte, i int) (key, value []byte, next int, ok bool) {
	if rawjson.At(b, i) != '"' {
		return nil, nil, 0, false
	}
	end := rawjson.StringEnd(b, i)
	key = b[i:end]
	i = rawjson.SkipSpace(b, end)
	if rawjson.At(b, i) != ':' {
		return nil, nil, 0, false
	}
	i = rawjson.SkipSpace(b, i+1)
	if rawjson.At(b, i) != '"' {
		return nil, nil, 0, false
	}
	end = rawjson.StringEnd(b, i)
	return key, b[i:end], end, true
}

// stringIs reports whether the JSON string s says text, without allocating in
// the usual case of a string written plainly.
func stringIs(s []byte, text string) bool {
	if rawjson.Plain(s) {
		return len(s) == len(text)+2 && string(s[1:len(s)-1]) == text
	}
	return rawjson.Unquote(s) == text
}

// messagesField splits an object into the value of its `messages` field and
// the object without that field (nil when messages was its only field). It
// fails when the object has no `messages` field, or has it twice (Python's
// json keeps the last, and a walk that kept the first would check other
// text than the model reads: such an object is checked as JSON, whole).
func messagesField(b []byte) (messages, rest []byte, ok bool) {
	var others [][]byte // the other members, raw
	twice := false
	rawjson.Members(b, 0, func(key, value []byte) bool {
		if !stringIs(key, "messages") {
			others = append(others, b[offset(b, key):offset(b, value)+len(value)])
			return true
		}
		twice = messages != nil
		messages = value
		return !twice
	})
	if messages == nil || twice {
		return nil, nil, false
	}
	if len(others) > 0 {
		rest = append([]byte{'{'}, bytes.Join(others, []byte{','})...)
		rest = append(rest, '}')
	}
	return messages, rest, true
}

// offset is where sub, a sub-slice of b, starts in b: the raw member runs
// from its key to the end of its value, space between them kept.
func offset(b, sub []byte) int { return cap(b) - cap(sub) }

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
			end := rawjson.StringEnd(b, i)
			if s := b[i:end]; rawjson.Plain(s) {
				out = append(out, s...)
			} else {
				out = appendQuoted(out, rawjson.Unquote(s))
			}
			i = end
		default:
			out = append(out, c)
			i++
		}
	}
	return out
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
