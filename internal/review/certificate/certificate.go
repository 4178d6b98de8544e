// Package certificate writes and checks the certificates of `calibrate
// --certificates`: one JSON line per threshold saying which group it was
// computed for, under which method and options, from exactly which labels
// (their SHA-256) and with what statistic, so that anyone holding the same
// `/labels` lines can recompute it with `verify`.
//
// A certificate's id is the first 16 hex digits of the SHA-256 of its own
// compact JSON without `id`, keys sorted: the gateway stamps it in
// `X-Route-Certificate` on every answer a certified threshold routed
// `auto`, so an answer names the evidence it was trusted on, and the id
// cannot be kept while any field it covers changes.
package certificate

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/systemone/systemone-gateway/internal/review/record"
)

// Certificate is one threshold's certificate, the documented fields.
type Certificate struct {
	// ID is derived from every other field (see Seal); "" until sealed.
	ID string `json:"id"`
	// Model, Type, Question and Org name the group: Question is "" for a
	// type group, Org "" for a pooled one.
	Model    string `json:"model"`
	Type     string `json:"type"`
	Question string `json:"question"`
	Org      string `json:"org"`
	// By and MinLabels are the grouping the group came from.
	By        string `json:"by"`
	MinLabels int    `json:"min_labels"`
	// Threshold is the threshold, unrounded.
	Threshold float64 `json:"threshold"`
	// Target, Delta and Method are the calibration's options.
	Target float64 `json:"target"`
	Delta  float64 `json:"delta"`
	Method string  `json:"method"`
	// Entries, Lines and Agree are the counts at the threshold: entries,
	// labelled questions, and those that agree.
	Entries int `json:"entries"`
	Lines   int `json:"lines"`
	Agree   int `json:"agree"`
	// Evidence is the method's statistic at the threshold: the lower bound
	// for `uniform`, the e-value for `anytime` and `weighted`.
	Evidence float64 `json:"evidence"`
	// LabelsSHA256 is the Digest of the group's audited lines;
	// LabelsUntil the newest `ts` among them.
	LabelsSHA256 string `json:"labels_sha256"`
	LabelsUntil  string `json:"labels_until"`
	// Created is when the certificate was written, RFC 3339 UTC.
	Created string `json:"created"`
	// AsOf is the time of the look the evidence was taken at (RFC 3339
	// UTC), CorrectWithin the correction window (a Go duration) and
	// MaxQuestions the most questions of the group an entry could hold:
	// what the complete prefix and the weights were computed with, so
	// that verify recomputes the same. Absent from a certificate written
	// before they were recorded (read as a window of 0 at labels_until).
	AsOf          string `json:"as_of,omitempty"`
	CorrectWithin string `json:"correct_within,omitempty"`
	MaxQuestions  int    `json:"max_questions,omitempty"`
	// Since is the first entry id the evidence was taken from (`calibrate
	// --since`), so that verify leaves out the same entries; absent when
	// every entry counted.
	Since string `json:"since,omitempty"`
	// Family is true for a threshold of `calibrate --family`: delta
	// bounds the chance that any threshold of the calibration is wrong,
	// the group walked at its share of it.
	Family bool `json:"family,omitempty"`
	// PlanEntries and PlanCreated are the plan a `uniform` certificate's
	// one look was fixed by (stored through the review API's /plans
	// before labelling began): the number of entries the look took, and
	// when the plan was stored. verify refuses a uniform certificate
	// without them, or whose plan the review API does not hold as is.
	PlanEntries int    `json:"plan_entries,omitempty"`
	PlanCreated string `json:"plan_created,omitempty"`
}

// IDLen is the number of hex digits of a certificate id.
const IDLen = 16

// ValidID reports whether s has the form of a certificate id: IDLen
// lowercase hex digits.
func ValidID(s string) bool {
	if len(s) != IDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// Seal sets c.ID from the rest of c, and returns c. A statistic that JSON
// cannot hold (an e-value that overflowed) is capped at the largest float.
func (c Certificate) Seal() Certificate {
	c.Evidence = finite(c.Evidence)
	c.ID = c.computeID()
	return c
}

func (c Certificate) computeID() string {
	c.ID = ""
	raw, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("certificate: marshal: %v", err)) // only a NaN gets here; Seal removes Inf
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(raw, &fields)
	delete(fields, "id")
	sorted, _ := json.Marshal(fields) // a map marshals with its keys sorted
	sum := sha256.Sum256(sorted)
	return hex.EncodeToString(sum[:])[:IDLen]
}

func finite(f float64) float64 {
	switch {
	case math.IsInf(f, 1):
		return math.MaxFloat64
	case math.IsInf(f, -1):
		return -math.MaxFloat64
	}
	return f
}

// Sealed reports whether c.ID is the id of c's other fields.
func (c Certificate) Sealed() bool { return c.ID == c.computeID() }

// Write writes certs as JSON lines.
func Write(w io.Writer, certs []Certificate) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for _, c := range certs {
		if err := enc.Encode(c); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// Read reads a certificates file: one JSON certificate per line, blank
// lines skipped. A line that does not decode, or whose id does not match
// its fields, is an error naming its number.
func Read(r io.Reader) ([]Certificate, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []Certificate
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var c Certificate
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return nil, fmt.Errorf("certificate line %d: %v", n, err)
		}
		if !c.Sealed() {
			return nil, fmt.Errorf("certificate line %d: id %q is not the id of its fields (the certificate was edited)", n, c.ID)
		}
		out = append(out, c)
	}
	return out, sc.Err()
}

// Differences lists, in words, how got (a certificate recomputed from the
// labels) differs from want (the one on file): the labels, the threshold,
// the counts, the statistic. Neither id nor creation time is compared:
// they differ whenever anything else does, or by when it was made.
func Differences(want, got Certificate) []string {
	var d []string
	if want.LabelsSHA256 != got.LabelsSHA256 {
		d = append(d, fmt.Sprintf("labels changed (sha256 %s, now %s)", short(want.LabelsSHA256), short(got.LabelsSHA256)))
	}
	if want.LabelsUntil != got.LabelsUntil {
		d = append(d, fmt.Sprintf("labels_until %s, now %s", want.LabelsUntil, orNone(got.LabelsUntil)))
	}
	if want.Threshold != got.Threshold {
		d = append(d, fmt.Sprintf("threshold %v, now %s", want.Threshold, orNone(formatOr(got.Threshold, got.Method))))
	}
	if want.Entries != got.Entries || want.Lines != got.Lines || want.Agree != got.Agree {
		d = append(d, fmt.Sprintf("counts entries %d lines %d agree %d, now %d %d %d",
			want.Entries, want.Lines, want.Agree, got.Entries, got.Lines, got.Agree))
	}
	if !sameFloat(want.Evidence, got.Evidence) {
		d = append(d, fmt.Sprintf("evidence %v, now %v", want.Evidence, got.Evidence))
	}
	return d
}

// formatOr writes a recomputed threshold, or "" when the group has none
// (a recomputation without a threshold has Method "").
func formatOr(t float64, method string) string {
	if method == "" {
		return ""
	}
	return strconv.FormatFloat(t, 'g', -1, 64)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return orNone(sum)
}

// sameFloat compares statistics as the file holds them: after a JSON round
// trip, with room for the last bit of a logarithm computed on another
// machine.
func sameFloat(a, b float64) bool {
	return a == b || math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

// Digest hashes a group's audited `/labels` lines the documented way:
// each line as its compact JSON with keys sorted and values as in the
// line, followed by a newline, the lines sorted by `entry` then
// `question`. Add the lines after duplicates are dropped; order of adding
// does not matter.
type Digest struct {
	lines []canonical
	until time.Time
	ts    string
}

type canonical struct {
	entry    record.ID
	question string
	text     []byte
}

// Add adds one raw `/labels` line.
func (d *Digest) Add(raw []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return err
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(k)
		b.Write(name)
		b.WriteByte(':')
		if err := json.Compact(&b, fields[k]); err != nil {
			return err
		}
	}
	b.WriteString("}\n")

	var c canonical
	var entry, ts string
	_ = json.Unmarshal(fields["entry"], &entry)
	_ = json.Unmarshal(fields["question"], &c.question)
	_ = json.Unmarshal(fields["ts"], &ts)
	id, ok := record.ParseID(entry)
	if !ok {
		return fmt.Errorf("entry %q is not a stream entry id", entry)
	}
	c.entry, c.text = id, b.Bytes()
	d.lines = append(d.lines, c)
	if t, err := time.Parse(time.RFC3339Nano, ts); err == nil && (d.ts == "" || t.After(d.until)) {
		d.until, d.ts = t, ts
	}
	return nil
}

// Sum returns the hex SHA-256 of the lines added, and the newest `ts`
// among them ("" when none had one).
func (d *Digest) Sum() (sha string, until string) {
	slices.SortFunc(d.lines, func(a, b canonical) int {
		return cmp.Or(a.entry.Compare(b.entry), strings.Compare(a.question, b.question))
	})
	h := sha256.New()
	for _, l := range d.lines {
		h.Write(l.text)
	}
	return hex.EncodeToString(h.Sum(nil)), d.ts
}

// Len is the number of lines added.
func (d *Digest) Len() int { return len(d.lines) }

// Until reports whether a line's `ts` is at or before until (both RFC
// 3339): the lines verify recomputes a certificate from. A line without a
// readable ts is not.
func Until(ts, until string) bool {
	t, err1 := time.Parse(time.RFC3339Nano, ts)
	u, err2 := time.Parse(time.RFC3339Nano, until)
	return err1 == nil && err2 == nil && !t.After(u)
}
