package calibrate

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/cli"
	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

func TestParseSince(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want string // "" for an error
	}{
		{"1764000000000-7", "1764000000000-7"},
		{"2026-01-02T15:04:05Z", "1767366245000-0"},
		{"2026-01-02T15:04:05.123Z", "1767366245123-0"},
		// A fraction of a millisecond: the entries of that millisecond stay in.
		{"2026-01-02T15:04:05.123999Z", "1767366245123-0"},
		{"2026-01-02T16:04:05+01:00", "1767366245000-0"},
		{"1970-01-01T00:00:00Z", "0-0"},
		{"1969-12-31T23:59:59.999Z", ""},
		{"yesterday", ""},
		{"1764000000000", ""},
		{"-1-0", ""},
		{"2026-01-02", ""},
		{"", ""},
	} {
		got, err := ParseSince(tt.in)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("ParseSince(%q) = %s, want an error", tt.in, got)
		case tt.want == "" && strings.Contains(err.Error(), "\n"):
			t.Errorf("ParseSince(%q): a message of more than one line: %q", tt.in, err)
		case tt.want != "" && (err != nil || got.String() != tt.want || !got.Set):
			t.Errorf("ParseSince(%q) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

// sinceLine is a `/labels` line of entry <ms>-0 with one noul question.
func sinceLine(ms int, conf float64, agree bool, route string, extra ...string) string {
	line := fmt.Sprintf(`{"entry":"%d-0","request_id":"r%d","org":"","model":"m","type":"noul","question":"q","confidence":%v,"answer":0.9,"label":%v,"agree":%v,"audit":true,"route":%q,"reviewer":"ann","ts":"2026-01-01T00:00:00Z"}`,
		ms, ms, conf, agree, agree, route)
	for _, e := range extra {
		line = strings.Replace(line, `"request_id":"r`+fmt.Sprint(ms)+`"`, e, 1)
	}
	return line
}

// --since leaves out the entries before it: their labels, the pending
// line that held the prefix back, a line without an entry id; a copy
// after it of an answer first seen before it counts nowhere. The threshold
// in force still reads the answers before it.
func TestSinceLeavesOutEarlierEntries(t *testing.T) {
	var lines []string
	// Before: 200 disagreeing entries at 0.6, routed auto (the threshold in
	// force 0.6), and one audited question never labelled.
	for i := range 200 {
		lines = append(lines, sinceLine(1000+i, 0.6, false, "auto"))
	}
	lines = append(lines, `{"entry":"1300-0","request_id":"pending","model":"m","type":"noul","question":"q","confidence":0.6,"answer":0.9,"label":null,"agree":null,"audit":true,"route":"auto","ts":"2026-01-01T00:00:00Z"}`)
	lines = append(lines, `{"request_id":"no-entry","model":"m","type":"noul","question":"q","confidence":0.99,"answer":0.9,"label":false,"agree":false,"audit":true,"route":"human"}`)
	// After: 300 agreeing entries at 0.95, routed human (an alarm), and a
	// copy of an earlier answer (request r1000).
	for i := range 300 {
		lines = append(lines, sinceLine(2000+i, 0.95, true, "human"))
	}
	lines = append(lines, sinceLine(2500, 0.95, true, "human", `"request_id":"r1000"`))
	src := strings.Join(lines, "\n")

	opts := DefaultOptions()
	opts.Target, opts.CorrectWithin, opts.AsOf = 0.9, 0, time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	all, err := calibrateText(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	if g := all.Groups[0]; g.HasThreshold || g.WaitingOn != "1300-0" {
		t.Fatalf("without --since: %+v (want held back by the pending line, no threshold)", g)
	}
	opts.Since, _ = ParseSince("2000-0")
	res, err := calibrateText(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	g := res.Groups[0]
	if !g.HasThreshold || g.Labels != 300 || g.WaitingOn != "" || g.CompleteThrough != "2299-0" || res.Duplicates != 1 {
		t.Errorf("with --since: %+v, %d duplicates; want the 300 entries after it, a threshold", g, res.Duplicates)
	}
	if g.InForce == nil || g.InForce.Threshold != 0.6 || g.InForce.N != 300 || g.InForce.Agree != 300 {
		t.Errorf("in force %+v, want 0.6 from the answers before --since, agreement 300/300 after it", g.InForce)
	}
	if len(g.Bins) != 1 || g.Bins[0].From != 0.9 || g.Bins[0].N != 300 || g.Bins[0].Agree != 300 {
		t.Errorf("bins %+v, want one bin [0.9, 1] of 300 agreeing", g.Bins)
	}
	if len(res.Notes) == 0 || !strings.Contains(res.Notes[0], "202 lines of earlier entries left out") {
		t.Errorf("notes %q", res.Notes)
	}
	// The sample is whole again afterwards: a second look without --since
	// sees what the first did.
	s, _ := ReadSample(strings.NewReader(src))
	opts.Since = EntryID{}
	first, _ := s.Calibrate(opts)
	opts.Since, _ = ParseSince("2000-0")
	_, _ = s.Calibrate(opts)
	opts.Since = EntryID{}
	again, _ := s.Calibrate(opts)
	if first.Groups[0].Labels != again.Groups[0].Labels || again.Groups[0].WaitingOn != "1300-0" {
		t.Errorf("the sample changed after a --since look: %+v, then %+v", first.Groups[0], again.Groups[0])
	}
}

func calibrateText(src string, opts Options) (Result, error) {
	s, err := ReadSample(strings.NewReader(src))
	if err != nil {
		return Result{}, err
	}
	return s.Calibrate(opts)
}

// The command reads --since; a bad value is a usage error, one line; the
// table and --json say where the entries start; a certificate records it
// and verify recomputes with it (without it, the counts would differ).
func TestSinceCommand(t *testing.T) {
	var lines []string
	for i := range 150 {
		lines = append(lines, sinceLine(1000+i, 0.7, i%3 == 0, "auto"))
	}
	for i := range 150 {
		lines = append(lines, sinceLine(5000+i, 0.97, true, "auto"))
	}
	dir := t.TempDir()
	labels := filepath.Join(dir, "labels.ndjson")
	if err := os.WriteFile(labels, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--target", "0.9", "--correct-within", "0s", "--max-questions", "1"}

	for _, bad := range []string{"tuesday", "2026-13-01T00:00:00Z", "12-x"} {
		_, stderr, err := runCommand(t, nil, append(base, "--since", bad, labels)...)
		if cli.Status(err) != cli.StatusUsage || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "--since") {
			t.Errorf("--since %s: status %d, stderr %q", bad, cli.Status(err), stderr)
		}
	}

	out, _, err := runCommand(t, nil, append(base, "--since", "1970-01-01T00:00:05Z", labels)...)
	if err != nil || !strings.Contains(out, "entries from 5000-0 on: 150 audited labels used") {
		t.Errorf("table with --since: %v\n%s", err, out)
	}
	out, _, err = runCommand(t, nil, append(base, "--since", "5000-0", "--json", labels)...)
	var doc struct {
		Since  *string `json:"since"`
		Method string  `json:"method"`
		Groups []struct {
			Labels int `json:"labels"`
		} `json:"groups"`
	}
	if err != nil || json.Unmarshal([]byte(out), &doc) != nil || doc.Since == nil || *doc.Since != "5000-0" || doc.Method != MethodAnytime ||
		len(doc.Groups) != 1 || doc.Groups[0].Labels != 150 {
		t.Errorf("--json with --since: %v\n%s", err, out)
	}

	certs := filepath.Join(dir, "certs.jsonl")
	if _, _, err := runCommand(t, nil, append(base, "--since", "5000-0", "--certificates", certs, labels)...); err != nil {
		t.Fatal(err)
	}
	read, err := certificate.ReadFile(certs)
	if err != nil || len(read) != 1 || read[0].Since != "5000-0" || read[0].Entries > 150 {
		t.Fatalf("certificates %+v, %v", read, err)
	}
	raw := rawOf(lines)
	found, err := Verify(read, raw)
	if err != nil || len(found) != 1 || !found[0].OK() {
		t.Errorf("verify: %v %v", found, err)
	}
	// The same certificate recomputed over every entry is another: the
	// entries before --since would count.
	unsinced := read[0]
	unsinced.Since = ""
	if found, _ := Verify([]certificate.Certificate{unsinced.Seal()}, raw); len(found) != 1 || found[0].OK() {
		t.Errorf("verify without since: %v, want a mismatch", found)
	}
}

func rawOf(lines []string) [][]byte {
	raw := make([][]byte, len(lines))
	for i, l := range lines {
		raw[i] = []byte(l)
	}
	return raw
}
