package calibrate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/systemone/systemone-gateway/internal/review/client"
	"github.com/systemone/systemone-gateway/internal/review/record"
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
			return withLabelsHint(err, src)
		}
		defer rc.Close()
		body, name = rc, "GET "+redacted
		if err := readAll(body); err != nil {
			return withLabelsHint(fmt.Errorf("reading %s: %w", name, err), src)
		}
		return nil
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

// withLabelsHint adds to err, when the URL src does not end in /labels,
// the URL it likely meant: a review mount's base URL reaches the review
// page (/review/), or, without the slash, whatever the site serves there
// (the gateway's 401 invalid_api_key, often), not the export.
func withLabelsHint(err error, src string) error {
	u, perr := url.Parse(src)
	if perr != nil || strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/labels") {
		return err
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/labels"
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	return fmt.Errorf("%w; did you mean %s? (the review API's /labels endpoint)", err, u.Redacted())
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// openURL opens an http(s) `/labels` URL through the review API's client
// (internal/review/client: user info as basic auth to that origin only, no
// redirect followed), and returns its body, streaming, and the URL as
// messages show it.
func openURL(ctx context.Context, raw string) (io.ReadCloser, string, error) {
	review, err := client.New(raw, nil)
	if err != nil {
		return nil, "", errors.New("the labels URL does not parse")
	}
	body, err := review.Open(ctx, client.NDJSON)
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

// scanLines parses each line of r and hands it to add, in order. Lines
// are read in batches of parseBatchLines, each parsed on the machine's
// processors at once (parseLines); a bad line ends it, the lines before
// it handed over.
func scanLines(r io.Reader, add func(Line, []byte)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	num := 0
	var texts [][]byte
	var nums []int // each text's line number, from 1
	flush := func() error {
		lines, errs := parseLines(texts)
		for i, l := range lines {
			if errs[i] != nil {
				return fmt.Errorf("line %d: %v", nums[i], errs[i])
			}
			add(l, texts[i])
		}
		texts, nums = nil, nums[:0] // add may keep a text: each batch has its own
		return nil
	}
	for sc.Scan() {
		num++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		texts, nums = append(texts, bytes.Clone(raw)), append(nums, num)
		if len(texts) == parseBatchLines {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil { // the lines before a read error come first
		return err
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("line %d: longer than %d bytes", num+1, MaxLineBytes)
		}
		return fmt.Errorf("after line %d: %v", num, err)
	}
	return nil
}

// parseLine reads one `/labels` line (record.ParseLabel) into what the
// calibration keeps of it.
func parseLine(raw []byte) (Line, error) {
	rec, err := record.ParseLabel(raw)
	if err != nil {
		return Line{}, err
	}
	return LineOf(&rec)
}

// AddLabel adds one `/labels` line, already read (the review API hands its
// stored lines over without writing them out as text), as AddFrom adds a
// line it reads. The error says what the line lacks for the calibration.
func (s *Sample) AddLabel(rec *record.Label) error {
	l, err := LineOf(rec)
	if err != nil {
		return err
	}
	s.Add(l)
	return nil
}

// LineOf is what the calibration keeps of a `/labels` line: its draw
// checked (audit_floor and audit_from together, under audit_p), its type
// one the calibration knows.
func LineOf(rec *record.Label) (Line, error) {
	var err error
	l := Line{Model: rec.Model, Type: rec.Type, Question: rec.Question, Agree: rec.Agree, Audit: rec.Audit,
		Org: rec.Org, RequestID: rec.RequestID, Replay: rec.Route == RouteReplay || rec.Route == RouteReplayFailed, Pending: rec.Pending, Pass: rec.Pass,
		Auto: rec.Route == record.RouteAuto}
	if rec.Pass {
		l.Agree = false // a passed entry's questions count as disagreements
	}
	if rec.Confidence != nil {
		l.Confidence, l.HasConfidence = max(*rec.Confidence, 0), true // -0 would print as "-0"
	}
	var draw [3]*float64
	for i, n := range []json.Number{rec.AuditP, rec.AuditFloor, rec.AuditFrom} {
		if n != "" {
			f, _ := n.Float64() // ParseLabel wrote it from a float
			draw[i] = &f
		}
	}
	if l.Draw, err = makeDraw(draw[0], draw[1], draw[2]); err != nil {
		return Line{}, err
	}
	// entry, request_id, route, ts and org may be absent (a file written
	// by hand); an entry that is there is a stream id (ParseLabel checked).
	if id, ok := record.ParseID(rec.Entry); ok {
		l.Entry = EntryID{Ms: id.Ms, Seq: id.Seq, Set: true}
	}
	if at, err := time.Parse(time.RFC3339Nano, rec.TS); err == nil {
		l.Labelled = at.UnixNano()
	}
	if !slices.Contains(typeOrder, l.Type) {
		return Line{}, fmt.Errorf("\"type\" is %q, want one of %s", l.Type, strings.Join(typeOrder, ", "))
	}
	return l, nil
}
