package evaluation

import (
	"bytes"
	"errors"
	"slices"
	"strconv"

	"github.com/systemone/systemone-gateway/internal/rawjson"
)

// ErrNotSpliceable is a body the splicing functions cannot walk: not a
// JSON object, or one whose `questions` or `answers` is not an object.
var ErrNotSpliceable = errors.New("body is not an object the gateway can splice")

// AskAgain returns the request body that asks the questions named in ids
// again, of model: request, a decoded request body that ParseRequest
// accepted, with its `model` set to model (added when absent) and its
// `questions` holding only the members whose id is in ids. Every other
// member, `state` included, and every kept question are the request's
// bytes, unchanged.
func AskAgain(request []byte, ids []string, model string) ([]byte, error) {
	quoted := strconv.Quote(model)
	out := make([]byte, 0, len(request))
	out = append(out, '{')
	sawModel, ok := false, true
	walked := rawjson.Members(request, 0, func(key, value []byte) bool {
		switch rawjson.Unquote(key) {
		case "model":
			sawModel, value = true, []byte(quoted)
		case "questions":
			value, ok = keepMembers(value, ids)
		}
		out = appendMember(out, key, value)
		return ok
	})
	if !walked || !ok {
		return nil, ErrNotSpliceable
	}
	if !sawModel {
		out = appendMember(out, []byte(`"model"`), []byte(quoted))
	}
	return append(out, '}'), nil
}

// ReplaceAnswers returns first, a decoded evaluation response body, with
// the answers whose id is in ids replaced by second's answer objects of
// the same ids (as second's bytes), and `usage` the sum of both bodies'
// (see sumUsage). Every other member of first keeps its bytes: its
// `model` stays first's.
func ReplaceAnswers(first, second []byte, ids []string) ([]byte, error) {
	var secondAnswers, secondUsage []byte
	if !rawjson.Members(second, 0, func(key, value []byte) bool {
		switch rawjson.Unquote(key) {
		case "answers":
			secondAnswers = value
		case "usage":
			secondUsage = value
		}
		return true
	}) {
		return nil, ErrNotSpliceable
	}
	replacements := map[string][]byte{}
	if !rawjson.Members(secondAnswers, 0, func(key, value []byte) bool {
		if id := rawjson.Unquote(key); slices.Contains(ids, id) {
			replacements[id] = value // a repeated id: its last, as ParseResponse reads it
		}
		return true
	}) || len(replacements) != len(ids) {
		return nil, ErrNotSpliceable
	}

	out := make([]byte, 0, len(first)+len(second))
	out = append(out, '{')
	ok := true
	walked := rawjson.Members(first, 0, func(key, value []byte) bool {
		switch rawjson.Unquote(key) {
		case "answers":
			value, ok = replaceMembers(value, replacements)
		case "usage":
			value = sumUsage(value, secondUsage)
		}
		out = appendMember(out, key, value)
		return ok
	})
	if !walked || !ok {
		return nil, ErrNotSpliceable
	}
	return append(out, '}'), nil
}

// keepMembers returns the object obj with only the members whose id is
// in ids.
func keepMembers(obj []byte, ids []string) ([]byte, bool) {
	out := []byte{'{'}
	ok := rawjson.Members(obj, 0, func(key, value []byte) bool {
		if slices.Contains(ids, rawjson.Unquote(key)) {
			out = appendMember(out, key, value)
		}
		return true
	})
	return append(out, '}'), ok
}

// replaceMembers returns the object obj with the value of each member
// whose id is a key of with replaced by its value there.
func replaceMembers(obj []byte, with map[string][]byte) ([]byte, bool) {
	out := []byte{'{'}
	ok := rawjson.Members(obj, 0, func(key, value []byte) bool {
		if v, found := with[rawjson.Unquote(key)]; found {
			value = v
		}
		out = appendMember(out, key, value)
		return true
	})
	return append(out, '}'), ok
}

// sumUsage returns the usage object first with each whole-number member
// (input_tokens, output_tokens) that second also has as a whole number
// replaced by the sum of both; every other member as first has it. A
// first usage that is not an object is kept as it is.
func sumUsage(first, second []byte) []byte {
	counts := map[string]int64{}
	rawjson.Members(second, 0, func(key, value []byte) bool {
		if n, err := strconv.ParseInt(string(value), 10, 64); err == nil && n >= 0 {
			counts[rawjson.Unquote(key)] = n
		}
		return true
	})
	out := []byte{'{'}
	if !rawjson.Members(first, 0, func(key, value []byte) bool {
		if n, err := strconv.ParseInt(string(value), 10, 64); err == nil && n >= 0 {
			if add, found := counts[rawjson.Unquote(key)]; found {
				value = strconv.AppendInt(nil, n+add, 10)
			}
		}
		out = appendMember(out, key, value)
		return true
	}) {
		return first
	}
	return append(out, '}')
}

// appendMember appends `key:value` to out, an object being written,
// after a comma unless it is the object's first member.
func appendMember(out, key, value []byte) []byte {
	if !bytes.HasSuffix(out, []byte{'{'}) {
		out = append(out, ',')
	}
	out = append(out, key...)
	out = append(out, ':')
	return append(out, value...)
}
