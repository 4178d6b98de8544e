package calibrate

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
)

// With every entry agreeing at one confidence, the anytime method reports
// a threshold after at most twice the entries the one-look method needs
// (MinLines), for targets from 0.5 and the usual deltas, when max_questions
// is the entries' one question; Needs (labels needed from nothing) is
// exactly the point where it first does. At the default max_questions,
// one-question entries each weigh 1/DefaultMaxQuestions: the cost is
// logged, and docs/calibration.md gives it.
func TestAnytimeAtMostTwiceUniform(t *testing.T) {
	for _, target := range []float64{0.5, 0.8, 0.9, 0.95, 0.99} {
		for _, delta := range []float64{0.01, 0.05, 0.1, 0.2} {
			need := newWalker(target, delta, false, 1).needed(1)
			if target == 0.9 && delta == 0.05 {
				t.Logf("target 0.9, delta 0.05, one question per entry: %d agreeing entries with max_questions 1, %d with the default %d",
					need, newWalker(target, delta, false, DefaultMaxQuestions).needed(1), DefaultMaxQuestions)
			}
			uniform := MinLines(target, delta)
			if need > 2*uniform {
				t.Errorf("target %v delta %v: anytime needs %d entries, uniform %d", target, delta, need, uniform)
			}
			has := func(n int) bool {
				var lines []Line
				for e := range n {
					lines = append(lines, simLine(e, 0, 0.7, true))
				}
				res, err := Calibrate(lines, Options{Target: target, Delta: delta, By: ByType, MinLabels: 1, MaxQuestions: 1})
				if err != nil {
					t.Fatal(err)
				}
				return res.Groups[0].HasThreshold
			}
			if !has(need) || has(need-1) {
				t.Errorf("target %v delta %v: a threshold at %d entries %v, at %d %v", target, delta, need, has(need), need-1, has(need-1))
			}
			if target == 0.95 && delta == 0.05 {
				t.Logf("target 0.95, delta 0.05: anytime needs %d agreeing entries, uniform %d", need, uniform)
			}
		}
	}
}

// labels_needed is exact under the anytime method: that many more agreeing
// entries at the top give a threshold, one fewer does not.
func TestAnytimeLabelsNeeded(t *testing.T) {
	var lines []Line
	for e := range 60 {
		lines = append(lines, simLine(e, 0, float64(e%10)/10+0.05, e%9 != 0))
	}
	opts := Options{Target: 0.9, Delta: 0.05, By: ByType, MinLabels: 1}
	res, err := Calibrate(lines, opts)
	if err != nil || res.Groups[0].HasThreshold {
		t.Fatalf("%+v %v", res, err)
	}
	need, top := res.Groups[0].LabelsNeeded, res.Groups[0].Top
	with := func(m int) bool {
		more := append([]Line{}, lines...)
		for e := range m {
			more = append(more, simLine(1000+e, 0, top, true))
		}
		res, err := Calibrate(more, opts)
		if err != nil {
			t.Fatal(err)
		}
		return res.Groups[0].HasThreshold
	}
	if need <= 0 || !with(need) || with(need-1) {
		t.Errorf("labels_needed %d: threshold with it %v, with one fewer %v", need, with(need), with(need-1))
	}
}

// Any target and delta in (0, 1) is answered, by every method, without a
// crash and with a finite labels_needed: down to delta 1e-300, with one
// disagreeing line (which once overflowed the search).
func TestExtremeOptions(t *testing.T) {
	simulationOnly(t)
	lines := []Line{simLine(0, 0, 0.9, false), simLine(1, 0, 0.8, true), simLine(2, 0, 0.95, true)}
	for _, method := range Methods {
		for _, target := range []float64{1e-9, 0.5, 0.999999} {
			for _, delta := range []float64{1e-300, 1e-17, 0.5, 1 - 1e-9} {
				// labels_expected's simulation too, where it stays quick.
				opts := Options{Target: target, Delta: delta, By: ByType, MinLabels: 1, Method: method, Expect: delta >= 1e-17}
				res, err := Calibrate(lines, opts)
				if err != nil {
					t.Fatalf("%s %v %v: %v", method, target, delta, err)
				}
				g := res.Groups[0]
				if !g.HasThreshold && (g.LabelsNeeded <= 0 || g.LabelsNeeded > math.MaxInt/4) {
					t.Errorf("%s target %v delta %v: labels_needed %d", method, target, delta, g.LabelsNeeded)
				}
				if _, err := res.MarshalJSON(); err != nil {
					t.Errorf("%s target %v delta %v: %v", method, target, delta, err)
				}
			}
		}
	}
}

// labelsGenerator writes n `/labels` lines on the fly, as a review API
// would stream them: entries of three noul questions.
type labelsGenerator struct {
	n, i int
	buf  []byte
}

func (g *labelsGenerator) Read(p []byte) (int, error) {
	for len(g.buf) < len(p) && g.i < g.n {
		e := g.i / 3
		g.buf = fmt.Appendf(g.buf, `{"entry":"%d-0","request_id":"req-%d","org":"acme","model":"service-1.0.0","type":"noul","question":"q%d","confidence":%.4f,"answer":0.81,"label":true,"agree":%v,"audit":true,"route":"auto","reviewer":"ana","ts":"2026-11-01T00:00:00Z"}`+"\n",
			1_700_000_000_000+e, e, g.i%3, float64((e*7919)%10000)/10000, (e*31)%17 != 0)
		g.i++
	}
	if len(g.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, g.buf)
	g.buf = g.buf[n:]
	return n, nil
}

// A million lines stream through in seconds, holding the compact records
// only: the heap after reading them grows by at most 160 bytes a line
// (a record is 72; the slice grows by a quarter at a time), where the
// lines' text is about 260 bytes each. Under the race detector, which
// slows everything tenfold, 100,000 lines show the same bound.
func TestMillionLines(t *testing.T) {
	n := 1_000_000
	if raceEnabled || testing.Short() {
		n = 100_000
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	s, err := ReadSample(&labelsGenerator{n: n})
	if err != nil {
		t.Fatal(err)
	}
	read := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	perLine := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	opts := DefaultOptions()
	opts.Target = 0.9
	res, err := s.Calibrate(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d lines: read in %v, calibrated in %v; heap %.0f bytes a line; %+v", n, read, time.Since(start)-read, perLine, res.Groups[0])
	if s.Lines() != n || perLine > 160 {
		t.Errorf("%d lines held, %.0f bytes a line", s.Lines(), perLine)
	}
	if !res.Groups[0].HasThreshold || res.Groups[0].Entries == 0 {
		t.Errorf("no threshold from a million lines: %+v", res.Groups[0])
	}
	if !strings.Contains(fmt.Sprint(res.Method), MethodAnytime) {
		t.Errorf("method %q", res.Method)
	}
}
