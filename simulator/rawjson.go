package simulator

import (
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/systemone/systemone-gateway/internal/rawjson"
)

// The functions in this file walk JSON that validateRequest accepted
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
	var ms []member
	var index map[string]int
	var err error
	ok := rawjson.Members(raw, 0, func(rawKey, value []byte) bool {
		var key string
		if key, err = decodeString(rawKey); err != nil {
			return false
		}
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
		return true
	})
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, errNotObject
	}
	return ms, nil
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
	return rawjson.Unquote(s), nil
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
			end := rawjson.StringEnd(value, i)
			n += stringTokens(value[i+1 : max(end-1, i+1)])
			i = end
		case c == '-' || c >= '0' && c <= '9':
			end := rawjson.ValueEnd(value, i)
			n += textTokens(string(value[i:end]))
			i = end
		case c == 't' || c == 'f':
			n++
			i = rawjson.ValueEnd(value, i)
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
			r, i = rawjson.Unescape(s, i)
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
