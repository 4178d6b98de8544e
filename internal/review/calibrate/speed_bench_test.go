package calibrate

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The cost of one look at a large export: 100,000 `/labels` lines in 100
// groups (34 versions by three types), the shape BENCHMARKS.md ("calibrate
// and /progress") measures. The review API's /progress runs the same
// Sample.Calibrate over its stored lines; its own benchmark is in
// internal/review/api.
//
//	go test -run '^$' -bench 'BenchmarkCalibrate100kLines100Groups' -benchtime 3x ./internal/review/calibrate/

// benchAsOf is the look of the benchmark's lines: a day and more after
// all but the newest entries were labelled.
var benchAsOf = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// benchProfile is a group's agreement at confidence c, by the group's
// number: high and flat, rising, good only above 0.5, flat at 0.85 (below
// a target of 0.9: no threshold) and poor (no threshold).
func benchProfile(g int, c float64) float64 {
	switch g % 5 {
	case 0:
		return 0.97
	case 1:
		return 0.70 + 0.28*c
	case 2:
		if c < 0.5 {
			return 0.6
		}
		return 0.99
	case 3:
		return 0.85
	}
	return 0.6 + 0.1*c
}

// benchLines generates about n `/labels` lines in the given number of
// groups (version svc-<g/3>, type <g%3>), in entry order: each entry one
// group's, of 1 to 4 questions (ids q0..q3) with confidences near one
// another on the two-decimal grid and agreements correlated within the
// entry; 5% of lines not audited; the newest 1% of entries labelled within
// the correction window, and the last of them with a question not labelled
// yet, so that the complete prefix holds some back; three orgs.
func benchLines(seed uint64, groups, n int) []Line {
	r := rand.New(rand.NewPCG(seed, 0xbe7c4))
	lines := make([]Line, 0, n+4)
	start := benchAsOf.Add(-30 * 24 * time.Hour)
	entries := n * 2 / 5 // 2.5 questions an entry
	for e := 0; len(lines) < n; e++ {
		g := r.IntN(groups)
		model, typ := fmt.Sprintf("svc-%02d", g/3), typeOrder[g%3]
		at := start.Add(time.Duration(e) * 25 * time.Second)
		labelled := at.Add(time.Hour)
		if e > entries*99/100 {
			labelled = benchAsOf.Add(-time.Hour) // within the correction window
		}
		base := math.Sqrt(r.Float64()) // more traffic at high confidence
		shared := r.Float64() < 0.5
		agreeAll := false
		q := 1 + r.IntN(4)
		for j := range q {
			c := math.Round(min(max(base+0.05*r.NormFloat64(), 0), 1)*100) / 100
			agree := r.Float64() < benchProfile(g, c)
			if j == 0 {
				agreeAll = agree
			} else if shared {
				agree = agreeAll
			}
			lines = append(lines, Line{
				Model: model, Type: typ, Question: "q" + strconv.Itoa(j), Confidence: c, HasConfidence: r.IntN(200) != 0,
				Agree: agree, Audit: r.IntN(20) != 0, Entry: EntryID{Ms: uint64(at.UnixMilli()), Set: true},
				RequestID: "r" + strconv.Itoa(e), Labelled: labelled.UnixNano(), Org: "org-" + strconv.Itoa(e%3),
				Pending: e > entries*995/1000 && j == q-1 && r.IntN(4) == 0,
			})
		}
	}
	return lines
}

// benchNDJSON writes lines as the review API's `/labels` export.
func benchNDJSON(lines []Line) []byte {
	var b bytes.Buffer
	for _, l := range lines {
		conf, label, agree := "null", strconv.FormatBool(l.Agree), strconv.FormatBool(l.Agree)
		if l.HasConfidence {
			conf = strconv.FormatFloat(l.Confidence, 'f', -1, 64)
		}
		if l.Pending {
			label, agree = "null", "null"
		}
		fmt.Fprintf(&b, `{"entry":"%d-%d","request_id":%q,"org":%q,"model":%q,"type":%q,"question":%q,"confidence":%s,"answer":true,"label":%s,"agree":%s,"audit":%v,"route":"auto","reviewer":"ana","ts":%q}`+"\n",
			l.Entry.Ms, l.Entry.Seq, l.RequestID, l.Org, l.Model, l.Type, l.Question, conf, label, agree, l.Audit,
			time.Unix(0, l.Labelled).UTC().Format(time.RFC3339Nano))
	}
	return b.Bytes()
}

// benchOptions are the command's defaults at target 0.9, as of benchAsOf.
func benchOptions(method string) Options {
	opts := DefaultOptions()
	opts.Target, opts.Method, opts.AsOf = 0.9, method, benchAsOf
	return opts
}

// BenchmarkCalibrate100kLines100Groups is Calibrate alone, per method,
// over lines already read.
func BenchmarkCalibrate100kLines100Groups(b *testing.B) {
	lines := benchLines(1, 100, 100_000)
	for _, method := range Methods {
		b.Run(method, func(b *testing.B) {
			opts := benchOptions(method)
			cpu := startCPU()
			for b.Loop() {
				if _, err := Calibrate(lines, opts); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b)
		})
	}
}

// BenchmarkCalibrateCommand100kLines is `calibrate --json` whole, from
// the NDJSON export on standard input to the JSON written.
func BenchmarkCalibrateCommand100kLines(b *testing.B) {
	text := benchNDJSON(benchLines(1, 100, 100_000))
	cpu := startCPU()
	for b.Loop() {
		_, _, err := runCommand(b, bytes.NewReader(text), "--target", "0.9", "--as-of", benchAsOf.Format(time.RFC3339), "--json", "-")
		if err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}

// cpuClock is the process's CPU time (user and system) at a start: on a
// shared machine the wall time says little, the CPU time what the work
// costs.
type cpuClock time.Duration

func processCPU() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

func startCPU() cpuClock { return cpuClock(processCPU()) }

// report adds the CPU seconds per operation since the start.
func (c cpuClock) report(b *testing.B) {
	b.ReportMetric((processCPU()-time.Duration(c)).Seconds()/float64(b.N), "cpu-s/op")
}
