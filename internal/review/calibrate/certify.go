package calibrate

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

// Certify writes a certificate for each group of res that has a threshold,
// and sets the group's Cert to its id, so that the fragment carries it.
// raw holds the text of every line calibrated, in the order added
// (LoadRaw); opts are the options res was computed with. created is the
// certificates' creation time.
func Certify(res *Result, opts Options, raw [][]byte, created time.Time) ([]certificate.Certificate, error) {
	var out []certificate.Certificate
	for i := range res.Groups {
		g := &res.Groups[i]
		if !g.HasThreshold {
			continue
		}
		c, err := certificateOf(*g, *res, opts, raw)
		if err != nil {
			return nil, err
		}
		c.Created = created.UTC().Format(time.RFC3339)
		c = c.Seal()
		g.Cert = c.ID
		out = append(out, c)
	}
	return out, nil
}

// certificateOf is the certificate of g, unsealed and undated: what verify
// recomputes and compares.
func certificateOf(g Group, res Result, opts Options, raw [][]byte) (certificate.Certificate, error) {
	var d certificate.Digest
	for _, at := range g.lines {
		if int(at) >= len(raw) {
			return certificate.Certificate{}, fmt.Errorf("calibrate: line %d of %d kept", at, len(raw))
		}
		if err := d.Add(raw[at]); err != nil {
			return certificate.Certificate{}, fmt.Errorf("line %d: %v", at+1, err)
		}
	}
	sum, until := d.Sum()
	c := certificate.Certificate{
		Model: g.Model, Type: g.Type, Question: g.Question, Org: g.Org,
		By: opts.By, MinLabels: opts.MinLabels,
		Target: res.Target, Delta: res.Delta, Method: res.Method,
		Entries: g.Entries, Lines: g.N, Agree: g.Agree, Evidence: g.Evidence,
		LabelsSHA256: sum, LabelsUntil: until,
		AsOf: time.Unix(0, opts.asOf()).UTC().Format(time.RFC3339Nano), CorrectWithin: opts.CorrectWithin.String(),
		MaxQuestions: opts.maxQuestions(), Since: opts.Since.String(), Family: opts.Family,
	}
	if g.HasThreshold {
		c.Threshold = g.Threshold
	} else {
		c.Method = "" // Differences reads it as "no threshold"
	}
	return c, nil
}

// Verification is verify's finding for one certificate.
type Verification struct {
	ID string
	// Differences is empty when the certificate checks.
	Differences []string
}

// OK reports whether the certificate checked.
func (v Verification) OK() bool { return len(v.Differences) == 0 }

// String is verify's line: "ok <id>" or "mismatch <id>: <what differs>".
func (v Verification) String() string {
	if v.OK() {
		return "ok " + v.ID
	}
	s := "mismatch " + v.ID + ": "
	for i, d := range v.Differences {
		if i > 0 {
			s += "; "
		}
		s += d
	}
	return s
}

// Verify recomputes each certificate from raw, the text of `/labels`
// lines: under the certificate's own options, from the lines with `ts` at
// or before its labels_until, it finds its group and compares.
//
// The certificates one calibration wrote (one `created`, one set of
// options) are recomputed together, from the lines at or before the
// newest labels_until among them. That takes every line at or before each
// one's own labels_until, and no line of a certificate's group is newer
// than its labels_until, so each group is recomputed from exactly its
// lines; and the other groups are as they were, so an org that reached
// min_labels after one group's newest label still has its own group, as
// it had when the certificates were written.
func Verify(certs []certificate.Certificate, raw [][]byte) ([]Verification, error) {
	type run struct {
		created string
		opts    Options
	}
	runOf := func(c certificate.Certificate) run {
		opts := Options{Target: c.Target, Delta: c.Delta, By: c.By, MinLabels: c.MinLabels, Method: c.Method, MaxQuestions: c.MaxQuestions, Family: c.Family}
		if c.MaxQuestions == 0 {
			opts.MaxQuestions = DefaultMaxQuestions
		}
		// The look as recorded; a certificate from before the look was
		// recorded is recomputed at its labels_until with no window.
		opts.AsOf, _ = time.Parse(time.RFC3339Nano, c.AsOf)
		opts.CorrectWithin, _ = time.ParseDuration(c.CorrectWithin)
		if c.Since != "" {
			// An id that does not read leaves every entry in: the
			// recomputation differs, and verify says so.
			opts.Since, _ = ParseSince(c.Since)
		}
		if c.AsOf == "" {
			opts.AsOf = time.Unix(0, untilNanos(c.LabelsUntil))
		}
		return run{c.Created, opts}
	}
	newest := map[run]int64{}
	for _, c := range certs {
		r := runOf(c)
		if u, ok := newest[r]; !ok || untilNanos(c.LabelsUntil) > u {
			newest[r] = untilNanos(c.LabelsUntil)
		}
	}
	results := map[run]Result{}
	kept := map[run][][]byte{}
	var out []Verification
	for _, c := range certs {
		r := runOf(c)
		res, ok := results[r]
		if !ok {
			if err := r.opts.Validate(); err != nil {
				out = append(out, Verification{ID: c.ID, Differences: []string{"options: " + err.Error()}})
				continue
			}
			var lines [][]byte
			s := NewSample()
			for i, text := range raw {
				l, err := parseLine(text)
				if err != nil {
					return nil, fmt.Errorf("line %d: %v", i+1, err)
				}
				switch {
				case l.Pending:
				case l.Labelled == 0:
					continue // a label from when unknown
				case l.Labelled > newest[r]:
					// Labelled after the certificate: not labelled then,
					// so it held its entry out of the prefix.
					l.Pending, l.Agree, l.Labelled = true, false, 0
				}
				s.Add(l)
				lines = append(lines, text)
			}
			var err error
			if res, err = s.Calibrate(r.opts); err != nil {
				return nil, err
			}
			results[r], kept[r] = res, lines
		}
		i, found := slices.BinarySearchFunc(res.Groups, c, func(g Group, c certificate.Certificate) int {
			return cmp.Or(cmp.Compare(g.Model, c.Model), compareTypes(g.Type, c.Type), cmp.Compare(g.Question, c.Question), cmp.Compare(g.Org, c.Org))
		})
		if !found {
			out = append(out, Verification{ID: c.ID, Differences: []string{"no such group in the labels (labels changed)"}})
			continue
		}
		got, err := certificateOf(res.Groups[i], res, r.opts, kept[r])
		if err != nil {
			return nil, err
		}
		out = append(out, Verification{ID: c.ID, Differences: certificate.Differences(c, got)})
	}
	return out, nil
}

// untilNanos reads a certificate's labels_until; one that does not parse
// takes no line.
func untilNanos(until string) int64 {
	t, err := time.Parse(time.RFC3339Nano, until)
	if err != nil {
		return -1
	}
	return t.UnixNano()
}
