package calibrate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
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

// client fetches `/labels`: http.DefaultTransport's settings (proxy from
// the environment, dial and TLS timeouts, HTTP/2), plus a bound on the wait
// for the answer's headers. No overall timeout, since a large label set may
// take a while to stream.
var client = &http.Client{Transport: func() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = 30 * time.Second
	return t
}()}

func fetch(ctx context.Context, raw string) ([]Line, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the whole URL, password included.
		return nil, errors.New("the labels URL does not parse")
	}
	name := u.Redacted()
	user := u.User
	u.User = nil // sent as a header, never as part of a URL that may be logged
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %v", name, err)
	}
	if user != nil {
		pass, _ := user.Password()
		req.SetBasicAuth(user.Username(), pass)
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // its message repeats the URL
		}
		return nil, fmt.Errorf("GET %s: %v", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// The review API's errors are short {"detail": ...} bodies: worth
		// showing, within bounds.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		msg := fmt.Sprintf("GET %s: %s", name, resp.Status)
		if b := bytes.TrimSpace(body); len(b) > 0 {
			msg += ": " + strings.ToValidUTF8(string(b), "?")
		}
		if resp.StatusCode == http.StatusUnauthorized && user == nil {
			msg += " (put the review API's basic_auth user in the URL: https://user:password@host/...)"
		}
		return nil, errors.New(msg)
	}
	lines, err := ReadLines(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading GET %s: %w", name, err)
	}
	return lines, nil
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
