package calibrate

import (
	"math"
	"testing"
)

// The bins' intervals are Wilson's: 9 of 10 at 95% is [0.5958, 0.9821]
// (Newcombe 1998, table I, method 3, for 81/263 gives [0.2553, 0.3662];
// both checked here).
func TestWilson(t *testing.T) {
	for _, tt := range []struct {
		k, n   float64
		lo, hi float64
	}{{9, 10, 0.5958, 0.9821}, {81, 263, 0.2553, 0.3662}, {0, 10, 0, 0.2775}, {10, 10, 0.7225, 1}} {
		lo, hi := wilson(tt.k/tt.n, tt.n)
		if math.Abs(lo-tt.lo) > 5e-5 || math.Abs(hi-tt.hi) > 5e-5 {
			t.Errorf("wilson(%v/%v) = [%.4f, %.4f], want [%.4f, %.4f]", tt.k, tt.n, lo, hi, tt.lo, tt.hi)
		}
	}
}

// Under the weighted method a bin's agreement weighs each question by
// 1/audit_p, and its interval takes Kish's effective number.
func TestWeightedBins(t *testing.T) {
	line := func(entry uint64, conf float64, agree bool, p float64) Line {
		return Line{Model: "m", Type: "noul", Question: "q", Confidence: conf, HasConfidence: true, Agree: agree, Audit: true,
			Entry: EntryID{Ms: entry, Set: true}, Draw: Draw{P: p, HasP: true, Active: true, Floor: 0.1, From: 0.5}}
	}
	lines := []Line{line(1, 0.35, true, 0.5), line(2, 0.31, false, 0.1), line(3, 0.95, true, 0.5)}
	res, err := Calibrate(lines, Options{Target: 0.9, Delta: 0.1, By: ByType, MinLabels: 1, Method: MethodWeighted})
	if err != nil {
		t.Fatal(err)
	}
	bins := res.Groups[0].Bins
	if len(bins) != 2 || bins[0].From != 0.3 || bins[0].To != 0.4 || bins[0].N != 2 || bins[0].Agree != 1 || bins[1].From != 0.9 || bins[1].N != 1 {
		t.Fatalf("bins %+v", bins)
	}
	// Weights 2 (agrees) and 10 (disagrees): 2/12; Kish n = 144/104.
	lo, hi := wilson(2.0/12, 144.0/104)
	if b := bins[0]; math.Abs(b.Agreement-2.0/12) > 1e-12 || b.Lower != lo || b.Upper != hi {
		t.Errorf("weighted bin %+v, want agreement 1/6 in [%v, %v]", b, lo, hi)
	}
}

// The threshold in force is read from the group's InForceWindow newest
// answers routed auto: a threshold raised since shows as the new one.
func TestInForceFromTheNewestAutoAnswers(t *testing.T) {
	var lines []Line
	add := func(conf float64, auto bool) {
		lines = append(lines, Line{Model: "m", Type: "noul", Question: "q", Confidence: conf, HasConfidence: true, Agree: true, Audit: true,
			Entry: EntryID{Ms: uint64(len(lines) + 1), Set: true}, Auto: auto})
	}
	for i := range 40 {
		add(0.5+float64(i%10)/100, true) // the old threshold, 0.5
	}
	for i := range 100 {
		c := 0.3 + float64(i%70)/100 // the new one, 0.8: below it routed human
		add(c, c >= 0.8)
	}
	res, err := Calibrate(lines, Options{Target: 0.9, Delta: 0.1, By: ByType, MinLabels: 1})
	if err != nil {
		t.Fatal(err)
	}
	in := res.Groups[0].InForce
	if in == nil || in.Threshold != 0.8 || in.N != 20 || in.Agree != 20 {
		t.Errorf("in force %+v, want 0.8 (the 20 newest auto answers), 20 questions at or above it", in)
	}
	// No answer routed auto: none shown.
	for i := range lines {
		lines[i].Auto = false
	}
	if res, _ := Calibrate(lines, Options{Target: 0.9, Delta: 0.1, By: ByType, MinLabels: 1}); res.Groups[0].InForce != nil {
		t.Errorf("in force %+v without an auto answer", res.Groups[0].InForce)
	}
}
