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

	"github.com/systemone/systemone-gateway/internal/reviewapi"
)

// MaxLineBytes bounds one `/labels` line. A real line is a few hundred bytes;
// the bound only keeps a wrong URL (a large file, a stream) from filling
// memory one line at a time.
const MaxLineBytes = 1 << 20

// Load reads the `/labels` lines of src: "-" reads stdin, an http:// or
// https:// URL is fetched with GET (its user info, if any, sent as basic
// auth, since the review API sits behind basic_auth), anything else is a
// file path. Errors name the source (without a password) and, for a
// malformed line, its number.
func Load(ctx context.Context, src string, stdin io.Reader) ([]Line, error) {
	switch {
	case src == "-":
		lines, err := ReadLines(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading standard input: %w", err)
		}
		return lines, nil
	case hasPrefixFold(src, "http://") || hasPrefixFold(src, "https://"):
		return fetch(ctx, src)
	}
	f, err := os.Open(src)
	if err != nil {
		return nil, err // *PathError names the file
	}
	defer f.Close()
	lines, err := ReadLines(f)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", src, err)
	}
	return lines, nil
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func fetch(ctx context.Context, raw string) ([]Line, error) {
	body, name, err := openURL(ctx, raw)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	lines, err := ReadLines(body)
	if err != nil {
		return nil, fmt.Errorf("reading GET %s: %w", name, err)
	}
	return lines, nil
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
// (from 1). Fields the calibration does not read are not checked.
func ReadLines(r io.Reader) ([]Line, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	var lines []Line
	num := 0
	for sc.Scan() {
		num++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		l, err := parseLine(raw)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", num, err)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than %d bytes", num+1, MaxLineBytes)
		}
		return nil, fmt.Errorf("after line %d: %v", num, err)
	}
	return lines, nil
}

func parseLine(raw []byte) (Line, error) {
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
	l.Confidence = max(l.Confidence, 0) // -0 would print as "-0"
	if !slices.Contains(typeOrder, l.Type) {
		return Line{}, fmt.Errorf("\"type\" is %q, want one of %s", l.Type, strings.Join(typeOrder, ", "))
	}
	return l, nil
}

// abbreviate shows a JSON value in an error, cut to a readable length.
func abbreviate(v json.RawMessage) string {
	r := []rune(strings.ToValidUTF8(string(v), "?"))
	if len(r) > 40 {
		return string(r[:37]) + "..."
	}
	return string(r)
}
