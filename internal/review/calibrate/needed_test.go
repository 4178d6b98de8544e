package calibrate

import (
	"math"
	"math/rand/v2"
	"testing"
)

// withNeeded runs the real walk over lines plus m more audited lines, all
// agreeing, at confidence top, and reports whether the group has a
// threshold then: the contract's definition of labels_needed, literally.
func withNeeded(t *testing.T, lines []Line, m int, top float64, opts Options) bool {
	t.Helper()
	all := append([]Line(nil), lines...)
	for range m {
		all = append(all, Line{Model: "m", Type: "noul", Question: "q", Confidence: top, HasConfidence: true, Agree: true, Audit: true})
	}
	res, err := Calibrate(all, opts)
	if err != nil || len(res.Groups) != 1 {
		t.Fatalf("Calibrate: %v, %d groups", err, len(res.Groups))
	}
	return res.Groups[0].HasThreshold
}

func group(t *testing.T, lines []Line, opts Options) Group {
	t.Helper()
	res, err := Calibrate(lines, opts)
	if err != nil || len(res.Groups) != 1 {
		t.Fatalf("Calibrate: %v, %d groups", err, len(res.Groups))
	}
	return res.Groups[0]
}

func line(c float64, agree bool) Line {
	return Line{Model: "m", Type: "noul", Question: "q", Confidence: c, HasConfidence: true, Agree: agree, Audit: true}
}

// unread is an audited line of group m/noul with no confidence.
func unread(agree bool) Line {
	return Line{Model: "m", Type: "noul", Question: "q", Agree: agree, Audit: true}
}

func repeat(n int, l Line) []Line {
	out := make([]Line, n)
	for i := range out {
		out[i] = l
	}
	return out
}

func TestLabelsNeededHandComputed(t *testing.T) {
	o95 := Options{Target: 0.95, Delta: 0.05, By: ByType, MinLabels: 1, Method: MethodUniform}
	// One failure: LB(n-1, n) >= t exactly when P(X >= n-1 | n, t) =
	// t^n + n t^(n-1) (1-t) <= delta (the bound's definition). The smallest
	// such n, found here without gonum:
	oneFailure := 0
	for n := 2; oneFailure == 0; n++ {
		if math.Pow(0.95, float64(n))+float64(n)*math.Pow(0.95, float64(n-1))*0.05 <= 0.05 {
			oneFailure = n
		}
	}
	if oneFailure != 93 {
		t.Fatalf("one failure needs n = %d, the published Clopper-Pearson figure is 93", oneFailure)
	}
	for _, tt := range []struct {
		name  string
		lines []Line
		want  int
		why   string
	}{
		// 0.95^59 = 0.0485 <= 0.05 < 0.95^58 = 0.0510.
		{"an audited line with no confidence, nothing else: 59 at confidence 1", []Line{unread(true)}, 59, WhyTooFew},
		{"10 agreeing lines: 49 more", repeat(10, line(0.9, true)), 49, WhyTooFew},
		{"58 agreeing lines: 1 more", repeat(58, line(0.9, true)), 1, WhyTooFew},
		{"59 lines, one disagreeing: to 93 lines", append(repeat(58, line(0.9, true)), line(0.9, false)), oneFailure - 59, WhyBelowTarget},
		{"one disagreeing line at the top, 60 agreeing below: to 93 lines at the top", append(repeat(60, line(0.5, true)), line(0.99, false)),
			// 0 lines: the walk starts at .5 with (60, 61): LB below 0.95.
			// m < 58: still at .5 with (60+m, 61+m), one failure: passes
			// from 93 lines, m = 32.
			oneFailure - 61, WhyBelowTarget},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := group(t, tt.lines, o95)
			if g.HasThreshold || g.LabelsNeeded != tt.want || g.Why != tt.why {
				t.Errorf("labels_needed %d why %q (threshold %v), want %d %q", g.LabelsNeeded, g.Why, g.HasThreshold, tt.want, tt.why)
			}
			top := g.Top
			if withNeeded(t, tt.lines, tt.want-1, top, o95) || !withNeeded(t, tt.lines, tt.want, top, o95) {
				t.Errorf("the walk disagrees with %d", tt.want)
			}
		})
	}
	// A group with a threshold needs none.
	if g := group(t, repeat(59, line(1, true)), o95); !g.HasThreshold || g.LabelsNeeded != 0 || g.Why != "" {
		t.Errorf("59 agreeing lines: %+v", g)
	}
	// An empty type group (with --by question, every line in a question
	// group of its own) needs MinLines.
	res, err := Calibrate(repeat(70, line(1, true)), Options{Target: 0.95, Delta: 0.05, By: ByQuestion, MinLabels: 30, Method: MethodUniform})
	if err != nil || len(res.Groups) != 2 || res.Groups[0].Question != "" || res.Groups[0].Labels != 0 || res.Groups[0].LabelsNeeded != 59 || res.Groups[1].LabelsNeeded != 0 {
		t.Errorf("empty type group: %+v %v", res.Groups, err)
	}
}

// TestLabelsNeededBrute checks labelsNeeded against its definition, a
// search over m = 0, 1, 2, ... with the real walk, on random groups made to
// fail: few lines, disagreements at the top, and ties.
func TestLabelsNeededBrute(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 19))
	opts := []Options{
		{Target: 0.5, Delta: 0.25, By: ByType, MinLabels: 1, Method: MethodUniform},
		{Target: 0.8, Delta: 0.1, By: ByType, MinLabels: 1, Method: MethodUniform},
		{Target: 0.9, Delta: 0.05, By: ByType, MinLabels: 1, Method: MethodUniform},
	}
	checked := 0
	for trial := range 300 {
		o := opts[trial%len(opts)]
		var lines []Line
		for range r.IntN(60) {
			c := float64(r.IntN(6)) / 5 // few distinct confidences: ties
			lines = append(lines, line(c, r.Float64() < 0.5+0.5*c))
		}
		if r.IntN(4) == 0 {
			lines = append(lines, unread(r.IntN(2) == 0))
		}
		if len(lines) == 0 {
			lines = []Line{unread(true)}
		}
		g := group(t, lines, o)
		if g.HasThreshold {
			if g.LabelsNeeded != 0 {
				t.Fatalf("group with a threshold: labels_needed %d", g.LabelsNeeded)
			}
			continue
		}
		checked++
		want := -1
		for m := 0; m <= 400 && want < 0; m++ {
			if withNeeded(t, lines, m, g.Top, o) {
				want = m
			}
		}
		if want < 0 {
			t.Fatalf("trial %d: no m up to 400 gives a threshold", trial)
		}
		if g.LabelsNeeded != want {
			t.Fatalf("trial %d (%+v, %d lines): labels_needed %d, the walk says %d", trial, o, len(lines), g.LabelsNeeded, want)
		}
	}
	if checked < 100 {
		t.Errorf("only %d groups without a threshold checked", checked)
	}
}

// TestLabelsNeededNotMonotone: the first m that passes may sit below a
// range of m that fail, as a higher start takes in a disagreement. The
// search must find it, not the passes further up.
func TestLabelsNeededNotMonotone(t *testing.T) {
	o := Options{Target: 0.5, Delta: 0.25, By: ByType, MinLabels: 1, Method: MethodUniform} // MinLines 2
	// .9: 1 line, disagreeing; .5: 1 line, disagreeing. m = 0: the walk
	// starts at .5 with (0, 2): fails. m = 1: it starts at .9 with (1, 2),
	// LB(1,2) = 0.134: fails. m = 2: (2, 3) 0.3264 fails; m = 3: (3, 4)
	// 0.4563 fails; m = 4: (4, 5) 0.5458 passes.
	lines := []Line{line(0.9, false), line(0.5, false)}
	if g := group(t, lines, o); g.LabelsNeeded != 4 {
		t.Errorf("labels_needed %d, want 4", g.LabelsNeeded)
	}
	// Many agreeing lines below a disagreeing top: with m = 0 the start is
	// low and fails narrowly; a few more lines there pass before the start
	// moves up to the top candidate.
	lines = append([]Line{line(0.9, false)}, repeat(3, line(0.5, true))...)
	lines = append(lines, line(0.5, false))
	// m = 0: start .9? n=1 < 2: skip; .5 (3, 5): LB(3,5) = 0.3633 fails.
	// m = 1: start .9 (1, 2): fails; so the segment below is empty (m < 1),
	// and from m = 1 on the start is .9 with one failure: (m, m+1) passes
	// from LB(3,4) = 0.4563 no, LB(4,5) = 0.5458: m = 4.
	if g := group(t, lines, o); g.LabelsNeeded != 4 {
		t.Errorf("labels_needed %d, want 4", g.LabelsNeeded)
	}
}
