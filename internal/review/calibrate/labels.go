package calibrate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/systemone/systemone-gateway/internal/reviewapi"
)

// MaxLineBytes bounds one `/labels` line. A real line is a few hundred bytes;
// the bound only keeps a wrong URL (a large file, a stream) from filling
// memory one line at a time.
const MaxLineBytes = 1 << 20

// Load reads the `/labels` lines of src into a Sample, a line at a time:
// "-" reads stdin, an http:// or
// https:// URL is fetched with GET (its user info, if any, sent as basic
// auth, since the review API sits behind basic_auth), anything else is a
// file path. Errors name the source (without a password) and, for a
// malformed line, its number.
func Load(ctx context.Context, src string, stdin io.Reader) (*Sample, error) {
	var s *Sample
	err := read(ctx, src, stdin, func(r io.Reader) (err error) {
		s, err = ReadSample(r)
		return err
	})
	return s, err
}

// LoadRaw reads src as Load does, and also keeps each line's text, as
// ReadSampleRaw does: for certificates.
func LoadRaw(ctx context.Context, src string, stdin io.Reader) (*Sample, [][]byte, error) {
	var s *Sample
	var raw [][]byte
	err := read(ctx, src, stdin, func(r io.Reader) (err error) {
		s, raw, err = ReadSampleRaw(r)
		return err
	})
	return s, raw, err
}

// read opens src and hands its lines to readAll; errors name the source.
func read(ctx context.Context, src string, stdin io.Reader, readAll func(io.Reader) error) error {
	var body io.Reader
	name := src
	switch {
	case src == "-":
		body, name = stdin, "standard input"
	case hasPrefixFold(src, "http://") || hasPrefixFold(src, "https://"):
		rc, redacted, err := openURL(ctx, src)
		if err != nil {
			return err
		}
		defer rc.Close()
		body, name = rc, "GET "+redacted
	default:
		f, err := os.Open(src)
		if err != nil {
			return err // *PathError names the file
		}
		defer f.Close()
		body = f
	}
	if err := readAll(body); err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	return nil
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// openURL opens an http(s) `/labels` URL through the review API's client
// (internal/reviewapi: user info as basic auth to that origin only, no
// redirect followed), and returns its body, streaming, and the URL as
// messages show it.
func openURL(ctx context.Context, raw string) (io.ReadCloser, string, error) {
	review, err := reviewapi.New(raw, nil)
	if err != nil {
		return nil, "", errors.New("the labels URL does not parse")
	}
	body, err := review.Open(ctx, reviewapi.NDJSON)
	return body, review.Redacted(), err
}

// ReadLines reads `/labels` NDJSON: one JSON object per line, blank lines
// skipped. A line that is not an object, lacks a field the calibration
// reads, or holds one of the wrong type is an error naming the line number
// (from 1). Fields the calibration does not read are not checked. It holds
// every line as a Line; ReadSample keeps only the compact record the
// calibration needs, for large inputs.
func ReadLines(r io.Reader) ([]Line, error) {
	var lines []Line
	err := scanLines(r, func(l Line, _ []byte) { lines = append(lines, l) })
	return lines, err
}

// ReadSampleRaw reads `/labels` as ReadSample does, and also keeps each
// line's text, in the order added: what a certificate's digest is
// computed over.
func ReadSampleRaw(r io.Reader) (*Sample, [][]byte, error) {
	s := NewSample()
	var raw [][]byte
	err := scanLines(r, func(l Line, text []byte) {
		s.Add(l)
		raw = append(raw, bytes.Clone(text))
	})
	if err != nil {
		return nil, nil, err
	}
	return s, raw, nil
}

// ReadSample reads `/labels` NDJSON as ReadLines does, one line at a time,
// into a Sample: memory grows by one compact record per line, never by the
// line's text.
func ReadSample(r io.Reader) (*Sample, error) {
	s := NewSample()
	if err := s.AddFrom(r); err != nil {
		return nil, err
	}
	return s, nil
}

// AddFrom adds the `/labels` lines of r to s, as ReadSample reads them. On
// an error the lines before the bad one stay added.
func (s *Sample) AddFrom(r io.Reader) error {
	return scanLines(r, func(l Line, _ []byte) { s.Add(l) })
}

// scanLines parses each line of r and hands it to add, in order.
func scanLines(r io.Reader, add func(Line, []byte)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	num := 0
	for sc.Scan() {
		num++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		l, err := parseLine(raw)
		if err != nil {
			return fmt.Errorf("line %d: %v", num, err)
		}
		add(l, raw)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("line %d: longer than %d bytes", num+1, MaxLineBytes)
		}
		return fmt.Errorf("after line %d: %v", num, err)
	}
	return nil
}

// wireLine is a `/labels` line as the fast path decodes it: one
// json.Unmarshal into typed fields, the fields it does not name skipped.
// A nil field was absent or null; a line the fast path cannot take whole
// (a null confidence, a field missing or of the wrong type) is read again
// by parseLineStrict, which tells the two apart and says what is wrong.
type wireLine struct {
	Entry      *string  `json:"entry"`
	RequestID  *string  `json:"request_id"`
	Model      *string  `json:"model"`
	Type       *string  `json:"type"`
	Question   *string  `json:"question"`
	Confidence *float64 `json:"confidence"`
	Agree      *bool    `json:"agree"`
	Audit      *bool    `json:"audit"`
	AuditP     *float64 `json:"audit_p"`
	AuditFloor *float64 `json:"audit_floor"`
	AuditFrom  *float64 `json:"audit_from"`
	Route      *string  `json:"route"`
	TS         *string  `json:"ts"`
	Org        *string  `json:"org"`
}

func parseLine(raw []byte) (Line, error) {
	var w wireLine
	if json.Unmarshal(raw, &w) != nil || w.Model == nil || w.Type == nil || w.Question == nil ||
		w.Agree == nil || w.Audit == nil || w.Confidence == nil {
		return parseLineStrict(raw)
	}
	l := Line{Model: *w.Model, Type: *w.Type, Question: *w.Question, Agree: *w.Agree, Audit: *w.Audit,
		Confidence: *w.Confidence, HasConfidence: true}
	if !(l.Confidence >= 0 && l.Confidence <= 1) {
		return parseLineStrict(raw) // says so, with the value as written
	}
	var err error
	if l.Draw, err = makeDraw(w.AuditP, w.AuditFloor, w.AuditFrom); err != nil {
		return parseLineStrict(raw)
	}
	if err := l.readOptional(w.Entry, w.RequestID, w.Route, w.TS, w.Org); err != nil {
		return Line{}, err
	}
	return l.finish()
}

// readOptional reads the fields that order, identify and place a line:
// entry, request_id, route, ts and org. Each may be absent (a file written
// by hand or by an older gateway); an entry that is there must be a
// stream id.
func (l *Line) readOptional(entry, requestID, route, ts, org *string) error {
	if org != nil {
		l.Org = *org
	}
	if entry != nil {
		id, ok := ParseEntryID(*entry)
		if !ok {
			return fmt.Errorf("\"entry\" is %q, want a stream entry id such as 1764000000000-0", *entry)
		}
		l.Entry = id
	}
	if requestID != nil {
		l.RequestID = *requestID
	}
	l.Replay = route != nil && *route == RouteReplay
	if ts != nil {
		if at, err := time.Parse(time.RFC3339Nano, *ts); err == nil {
			l.Labelled = at.UnixNano()
		}
	}
	return nil
}

// finish checks what every reading of a line checks last.
func (l Line) finish() (Line, error) {
	l.Confidence = max(l.Confidence, 0) // -0 would print as "-0"
	if !slices.Contains(typeOrder, l.Type) {
		return Line{}, fmt.Errorf("\"type\" is %q, want one of %s", l.Type, strings.Join(typeOrder, ", "))
	}
	return l, nil
}

// parseLineStrict reads a line field by field, telling an absent field
// from a null one, and says exactly what is wrong with a bad line.
func parseLineStrict(raw []byte) (Line, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return Line{}, errors.New("not a JSON object")
	}
	var l Line
	var err error
	// get decodes a field; json.Unmarshal would take null as "leave as is".
	get := func(name string, into any, want string, nullable bool) bool {
		v, ok := fields[name]
		if err != nil || !ok {
			if err == nil {
				err = fmt.Errorf("no %q field", name)
			}
			return false
		}
		if bytes.Equal(v, []byte("null")) {
			if !nullable {
				err = fmt.Errorf("%q is null, want %s", name, want)
			}
			return false
		}
		if json.Unmarshal(v, into) != nil {
			err = fmt.Errorf("%q is %s, want %s", name, abbreviate(v), want)
			return false
		}
		return true
	}
	get("model", &l.Model, "a string", false)
	get("type", &l.Type, "a string", false)
	get("question", &l.Question, "a string", false)
	get("agree", &l.Agree, "true or false", false)
	get("audit", &l.Audit, "true or false", false)
	const wantConfidence = "a number from 0 to 1 or null"
	l.HasConfidence = get("confidence", &l.Confidence, wantConfidence, true)
	if err == nil {
		l.Draw, err = readDraw(fields)
	}
	if err != nil {
		return Line{}, err
	}
	if l.HasConfidence && !(l.Confidence >= 0 && l.Confidence <= 1) {
		return Line{}, fmt.Errorf("\"confidence\" is %s, want %s", abbreviate(fields["confidence"]), wantConfidence)
	}
	var optional [5]*string
	for i, name := range []string{"entry", "request_id", "route", "ts", "org"} {
		var v string
		if raw, ok := fields[name]; ok && json.Unmarshal(raw, &v) == nil {
			optional[i] = &v
		} else if ok && name == "entry" && !bytes.Equal(raw, []byte("null")) {
			return Line{}, fmt.Errorf("\"entry\" is %s, want a stream entry id such as 1764000000000-0", abbreviate(raw))
		}
	}
	if err := l.readOptional(optional[0], optional[1], optional[2], optional[3], optional[4]); err != nil {
		return Line{}, err
	}
	return l.finish()
}

// abbreviate shows a JSON value in an error, cut to a readable length.
func abbreviate(v json.RawMessage) string {
	r := []rune(strings.ToValidUTF8(string(v), "?"))
	if len(r) > 40 {
		return string(r[:37]) + "..."
	}
	return string(r)
}
