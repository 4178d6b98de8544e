package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/systemone/systemone-gateway/internal/rawjson"
)

// setModel returns body, an evaluation request, with its top-level `model`
// member set to model: every other byte stays as it was (the value of each
// `model` member is replaced in place; without one, `"model":"<model>",` is
// inserted after the opening brace). The scan is tolerant of what Python's
// json reads and encoding/json does not (NaN, Infinity), since the service
// accepts such bodies and the gateway stores them as they came.
func setModel(body []byte, model string) ([]byte, error) {
	value, _ := json.Marshal(model) // a string always marshals
	s := scanner{b: body}
	s.skipSpace()
	if bytes.HasPrefix(s.b[s.i:], []byte("\xEF\xBB\xBF")) {
		s.i += 3
		s.skipSpace()
	}
	if !s.consume('{') {
		return nil, errors.New("the stored request is not a JSON object")
	}
	open := s.i
	var spans [][2]int // the value spans of every `model` member
	s.skipSpace()
	if !s.consume('}') {
		for {
			s.skipSpace()
			key, err := s.str()
			if err != nil {
				return nil, err
			}
			s.skipSpace()
			if !s.consume(':') {
				return nil, fmt.Errorf("no ':' at byte %d of the stored request", s.i)
			}
			s.skipSpace()
			start := s.i
			if err := s.value(); err != nil {
				return nil, err
			}
			if key == "model" {
				spans = append(spans, [2]int{start, s.i})
			}
			s.skipSpace()
			if s.consume('}') {
				break
			}
			if !s.consume(',') {
				return nil, fmt.Errorf("no ',' or '}' at byte %d of the stored request", s.i)
			}
		}
	}
	if len(spans) == 0 {
		out := make([]byte, 0, len(body)+len(value)+10)
		out = append(out, body[:open]...)
		out = append(out, `"model":`...)
		out = append(out, value...)
		rest := body[open:]
		if t := bytes.TrimLeft(rest, " \t\r\n"); len(t) == 0 || t[0] != '}' {
			out = append(out, ',')
		}
		return append(out, rest...), nil
	}
	out := make([]byte, 0, len(body)+len(value))
	last := 0
	for _, sp := range spans {
		out = append(out, body[last:sp[0]]...)
		out = append(out, value...)
		last = sp[1]
	}
	return append(out, body[last:]...), nil
}

// scanner walks JSON text without decoding it.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) skipSpace() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\r' || s.b[s.i] == '\n') {
		s.i++
	}
}

func (s *scanner) consume(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string and returns it decoded.
func (s *scanner) str() (string, error) {
	start := s.i
	if err := s.skipString(); err != nil {
		return "", err
	}
	var v string
	if err := json.Unmarshal(s.b[start:s.i], &v); err != nil {
		return "", fmt.Errorf("bad string at byte %d of the stored request", start)
	}
	return v, nil
}

func (s *scanner) skipString() error {
	if !s.consume('"') {
		return fmt.Errorf("no string at byte %d of the stored request", s.i)
	}
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			s.i += 2
			continue
		case '"':
			s.i++
			return nil
		}
		s.i++
	}
	return errors.New("the stored request ends inside a string")
}

// value skips one value: a string, an object or array (brackets counted,
// strings skipped whole), or a bare literal up to the next delimiter.
func (s *scanner) value() error {
	if s.i >= len(s.b) {
		return errors.New("the stored request ends before a value")
	}
	switch s.b[s.i] {
	case '"':
		return s.skipString()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if err := s.skipString(); err != nil {
					return err
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return nil
				}
			}
			s.i++
		}
		return errors.New("the stored request ends inside a value")
	}
	start := s.i
	for s.i < len(s.b) && !bytes.ContainsRune([]byte(",}] \t\r\n"), rune(s.b[s.i])) {
		s.i++
	}
	if s.i == start {
		return fmt.Errorf("no value at byte %d of the stored request", s.i)
	}
	return nil
}

// rewriteLine returns a `/labels` line, a JSON object that a decoder has
// already accepted, with the members named in set given new values, in
// their places; members the line lacks are appended in the order of
// names. Every other member is kept as it was, in its place: fields added
// to `/labels` later pass through. It walks the line in place
// (internal/rawjson): replay rewrites every line it reads.
func rewriteLine(line []byte, names []string, set map[string]json.RawMessage) ([]byte, error) {
	out := make([]byte, 0, len(line)+64)
	out = append(out, '{')
	done := make(map[string]bool, len(names))
	member := func(quotedKey, value []byte) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, quotedKey...)
		out = append(out, ':')
		out = append(out, value...)
	}
	if !rawjson.Members(line, 0, func(key, value []byte) bool {
		name := rawjson.Unquote(key)
		if nv, ok := set[name]; ok {
			value = nv
			done[name] = true
		}
		member(key, value)
		return true
	}) {
		return nil, errors.New("not a JSON object")
	}
	for _, name := range names {
		if !done[name] {
			k, _ := json.Marshal(name)
			member(k, set[name])
		}
	}
	return append(out, '}'), nil
}
