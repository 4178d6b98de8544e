package calibrate

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"
)

// binomialTail is P(X >= k) for X ~ Binomial(n, p), summed term by term: the
// regularized incomplete beta I_p(k, n-k+1), written independently of gonum.
func binomialTail(k, n int, p float64) float64 {
	sum := 0.0
	for i := k; i <= n; i++ {
		sum += binomial(n, i) * math.Pow(p, float64(i)) * math.Pow(1-p, float64(n-i))
	}
	return sum
}

func binomial(n, k int) float64 {
	c := 1.0
	for i := 1; i <= k; i++ {
		c = c * float64(n-k+i) / float64(i)
	}
	return c
}

// bisectBound is the Clopper-Pearson lower bound by its definition: the p at
// which seeing k or more successes in n has probability delta. The tail
// grows with p, so bisection converges to it.
func bisectBound(k, n int, delta float64) float64 {
	if k == 0 {
		return 0
	}
	lo, hi := 0.0, 1.0
	for range 200 {
		mid := (lo + hi) / 2
		if binomialTail(k, n, mid) < delta {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

func TestLowerBoundPublished(t *testing.T) {
	// Quantiles of Beta(a, b), as R's qbeta(p, a, b) gives them. The
	// two-sided 95% intervals of binom.test(9, 10), binom.test(7, 10) and
	// binom.test(5, 10) start at the 0.025 quantile and are printed by R as
	// 0.5549839, 0.3475471 and 0.1870860; the digits beyond are from mpmath
	// at 50 digits (bisection on betainc), as are the one-sided 0.05 rows
	// and the large-n rows, which the simulation relies on.
	for _, tt := range []struct {
		p, a, b, want float64
	}{
		{0.025, 9, 2, 0.55498388297180458},
		{0.025, 7, 4, 0.34754714994000271},
		{0.025, 5, 6, 0.18708602844739853},
		{0.05, 9, 2, 0.60583669756349522},
		{0.05, 7, 4, 0.39337578389458658},
		{0.05, 3, 3, 0.18925537743777079},
		{0.05, 1, 10, 0.0051161968918237014},
		{0.05, 58, 2, 0.92210207848118169},
		{0.05, 59, 1, 0.95049239011177305},
		{0.05, 10, 1, 0.74113444910694772},
		{0.01, 480, 21, 0.93466200363672264},
		{0.05, 950, 51, 0.93713659648762026},
		{0.05, 1900, 101, 0.94122968576932756},
	} {
		k, n := int(tt.a), int(tt.a+tt.b-1)
		if got := LowerBound(k, n, tt.p); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("LowerBound(%d, %d, %v) = %.17g, want %.17g (qbeta(%v, %v, %v))", k, n, tt.p, got, tt.want, tt.p, tt.a, tt.b)
		}
		if got := (distuv.Beta{Alpha: tt.a, Beta: tt.b}).Quantile(tt.p); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("gonum qbeta(%v, %v, %v) = %.17g, want %.17g", tt.p, tt.a, tt.b, got, tt.want)
		}
	}
}

func TestLowerBoundClosedForms(t *testing.T) {
	for _, delta := range []float64{0.01, 0.05, 0.1, 0.25, 0.5} {
		for n := 1; n <= 200; n++ {
			// k = n: Beta(n, 1) has CDF x^n, so the quantile is delta^(1/n).
			want := math.Pow(delta, 1/float64(n))
			if got := LowerBound(n, n, delta); got != want {
				t.Errorf("LowerBound(%d, %d, %v) = %v, want delta^(1/n) = %v", n, n, delta, got, want)
			}
			// gonum, which LowerBound does not use here, agrees.
			if got := (distuv.Beta{Alpha: float64(n), Beta: 1}).Quantile(delta); math.Abs(got-want) > 1e-12 {
				t.Errorf("gonum Beta(%d, 1) quantile %v = %v, want %v", n, delta, got, want)
			}
			// k = 1: Beta(1, n) has CDF 1 - (1-x)^n, so the quantile is
			// 1 - (1-delta)^(1/n).
			if n > 1 {
				want := -math.Expm1(math.Log1p(-delta) / float64(n)) // without cancellation
				if got := LowerBound(1, n, delta); math.Abs(got-want) > 1e-12*want {
					t.Errorf("LowerBound(1, %d, %v) = %v, want 1-(1-delta)^(1/n) = %v", n, delta, got, want)
				}
			}
			if got := LowerBound(0, n, delta); got != 0 {
				t.Errorf("LowerBound(0, %d, %v) = %v, want 0", n, delta, got)
			}
		}
	}
}

// TestLowerBoundSmall checks every k and n <= 10 against the definition.
func TestLowerBoundSmall(t *testing.T) {
	for _, delta := range []float64{0.05, 0.1, 0.25} {
		for n := 1; n <= 10; n++ {
			for k := 0; k <= n; k++ {
				got, want := LowerBound(k, n, delta), bisectBound(k, n, delta)
				if math.Abs(got-want) > 1e-12 {
					t.Errorf("LowerBound(%d, %d, %v) = %.17g, want %.17g", k, n, delta, got, want)
				}
				if k > 0 {
					if tail := binomialTail(k, n, got); math.Abs(tail-delta) > 1e-12 {
						t.Errorf("P(Bin(%d, %v) >= %d) = %v, want delta %v", n, got, k, tail, delta)
					}
				}
			}
		}
	}
	// By hand: 9 of 10 at delta 0.05 solves 10x^9 - 9x^10 = 0.05.
	if got := LowerBound(9, 10, 0.05); math.Abs(10*math.Pow(got, 9)-9*math.Pow(got, 10)-0.05) > 1e-14 {
		t.Errorf("LowerBound(9, 10, 0.05) = %v does not solve 10x^9 - 9x^10 = 0.05", got)
	}
}

func TestMinLines(t *testing.T) {
	for _, tt := range []struct {
		target, delta float64
		want          int
	}{
		{0.95, 0.05, 59}, // 0.05^(1/58) = 0.94970 < 0.95 <= 0.05^(1/59) = 0.95050
		{0.9, 0.05, 29},  // ln 0.05 / ln 0.9 = 28.43
		{0.7, 0.1, 7},    // 6.46
		{0.5, 0.25, 2},   // exactly 2: 0.25^(1/2) = 0.5 passes 0.5
		{0.5, 0.125, 3},  // exactly 3
		{0.5, 0.5, 1},    // exactly 1
		{0.1, 0.5, 1},    // 0.30, at least one line
		{0.99, 0.01, 459},
	} {
		got := MinLines(tt.target, tt.delta)
		if got != tt.want {
			t.Errorf("MinLines(%v, %v) = %d, want %d", tt.target, tt.delta, got, tt.want)
		}
		if LowerBound(got, got, tt.delta) < tt.target || got > 1 && LowerBound(got-1, got-1, tt.delta) >= tt.target {
			t.Errorf("MinLines(%v, %v) = %d is not the fewest lines at which full agreement passes", tt.target, tt.delta, got)
		}
	}
}

// l is an audited line of service-1.0.0, noul question q.
func l(conf float64, agree bool) Line {
	return Line{Model: "service-1.0.0", Type: "noul", Question: "q", Confidence: conf, HasConfidence: true, Agree: agree, Audit: true}
}

// noConf is an audited line whose confidence the gateway could not read.
func noConf(agree bool) Line {
	return Line{Model: "service-1.0.0", Type: "noul", Question: "q", Agree: agree, Audit: true}
}

const T, F = true, false

func TestWalk(t *testing.T) {
	// Target 0.5, delta 0.25: MinLines is 2, and the bounds are small
	// closed forms. LB(2,2) = 0.25^(1/2) = 0.5 (passes, just);
	// LB(3,3) = 0.25^(1/3) = 0.6300; LB(4,4) = 0.25^(1/4) = 0.7071;
	// LB(1,2) = 1 - 0.75^(1/2) = 0.1340; LB(2,3) solves 3x^2 - 2x^3 = 0.25,
	// x = 0.3264; LB(5,6) solves 6x^5 - 5x^6 = 0.25, x = 0.6105;
	// LB(4,5) solves 5x^4 - 4x^5 = 0.25, x = 0.5458; LB(8,9) solves
	// 9x^8 - 8x^9 = 0.25, x = 0.7277; LB(5,8) = 0.4445 (bisection).
	tests := []struct {
		name  string
		lines []Line
		want  Group
	}{{
		name: "start rule: the top candidate has 1 line < 2 and is skipped, untested, though it would fail",
		// .9 alone: LB(0,1) = 0 would fail; the walk starts at .8 (2 lines).
		lines: []Line{l(.9, F), l(.8, T), l(.7, T), l(.6, T)},
		// .8: LB(1,2) = 0.134 < 0.5: the first tested fails.
		want: Group{Labels: 4, Agree: 1, N: 2, LowerBound: 1 - math.Sqrt(0.75)},
	}, {
		name: "stops at the first failure though a lower candidate would pass",
		// .8: (2,2) 0.5 pass; .7: (2,3) 0.3264 fail: stop. Not stopping,
		// .5 (4,5) 0.5458 and .1 (8,9) 0.7277 would pass.
		lines: []Line{l(.9, T), l(.8, T), l(.7, F), l(.6, T), l(.5, T), l(.4, T), l(.3, T), l(.2, T), l(.1, T)},
		want:  Group{Labels: 9, Threshold: .8, HasThreshold: true, Agree: 2, N: 2, LowerBound: 0.5, Coverage: 2.0 / 9},
	}, {
		name: "walks down while every candidate passes",
		// .9 (2,2) 0.5; .8 (3,3) 0.63; .7 (4,4) 0.7071: all pass.
		lines: []Line{l(.95, T), l(.9, T), l(.8, T), l(.7, T)},
		want:  Group{Labels: 4, Threshold: .7, HasThreshold: true, Agree: 4, N: 4, LowerBound: math.Pow(0.25, 0.25), Coverage: 1},
	}, {
		name: "ties: a candidate takes every line at its confidence",
		// .9: 1 line, skipped; .8 (4,4) 0.7071 pass; .7 (5,6) 0.6105
		// pass, both .7 lines in; .6 (5,8) 0.4445 fails. Two nulls count
		// in Labels.
		lines: []Line{l(.9, T), l(.8, T), l(.8, T), l(.8, T), l(.7, F), l(.7, T), l(.6, F), l(.6, F), noConf(T), noConf(F)},
		want:  Group{Labels: 10, Threshold: .7, HasThreshold: true, Agree: 5, N: 6, LowerBound: bisectBound(5, 6, 0.25), Coverage: 6.0 / 10},
	}, {
		name: "no candidate has enough lines",
		// One line with a confidence: n never reaches 2. Nulls never count.
		lines: []Line{l(.9, T), noConf(T), noConf(T)},
		want:  Group{Labels: 3},
	}, {
		name:  "no line has a confidence",
		lines: []Line{noConf(T), noConf(T), noConf(T)},
		want:  Group{Labels: 3},
	}, {
		name: "every line ties: one candidate",
		// 1 (4,3): LB(3,4) solves 4x^3 - 3x^4 = 0.25, x = 0.4563: fails.
		lines: []Line{l(1, T), l(1, T), l(1, F), l(1, T)},
		want:  Group{Labels: 4, Agree: 3, N: 4, LowerBound: bisectBound(3, 4, 0.25)},
	}, {
		name:  "a zero-agreement first candidate has bound 0",
		lines: []Line{l(.6, F), l(.5, F), l(.4, T)},
		want:  Group{Labels: 3, Agree: 0, N: 2, LowerBound: 0},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Calibrate(tt.lines, Options{Target: 0.5, Delta: 0.25, By: ByType, MinLabels: 1, Method: MethodUniform})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Groups) != 1 {
				t.Fatalf("got %d groups, want 1", len(res.Groups))
			}
			tt.want.Model, tt.want.Type = "service-1.0.0", "noul"
			if got := res.Groups[0]; !groupsEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// groupsEqual compares groups, with bounds to 1e-12 (those the test
// computes by bisection).
func groupsEqual(a, b Group) bool {
	lb := math.Abs(a.LowerBound-b.LowerBound) <= 1e-12
	a.LowerBound, b.LowerBound = 0, 0
	return lb && reflect.DeepEqual(walkFields(a), walkFields(b))
}

// walkFields keeps what the walk decides, without what the group lacks
// (LabelsNeeded and the rest, which needed_test.go checks).
func walkFields(g Group) Group {
	g.LabelsNeeded, g.Why, g.Start, g.Top, g.Scored, g.ScoredAgree = 0, "", 0, 0, 0, 0
	// What the uniform walk reports beside: checked where it is computed.
	g.Entries, g.HasLowerBound, g.Evidence, g.Level, g.Needs = 0, false, 0, 0, 0
	g.LabelsExpected, g.HasLabelsExpected = 0, false
	g.lines = nil // the group's line places: for certificates
	g.Bins = nil  // the reliability diagram: since_test.go and bins_test.go
	g.Delta = 0   // the risk it was walked at: family_test.go
	return g
}

func TestWalkTarget(t *testing.T) {
	// Target 0.7, delta 0.1: MinLines is 7 (ln 0.1 / ln 0.7 = 6.46). Eight
	// agreeing lines then one that does not: .93 (7,7) 0.1^(1/7) = 0.7197
	// passes; .92 (8,8) 0.1^(1/8) = 0.7499 passes; .91 (8,9) solves
	// 9x^8 - 8x^9 = 0.1, x = 0.6316, fails. Threshold .92, coverage 8/10.
	lines := []Line{l(.99, T), l(.98, T), l(.97, T), l(.96, T), l(.95, T), l(.94, T), l(.93, T), l(.92, T), l(.91, F), l(.90, T)}
	res, err := Calibrate(lines, Options{Target: 0.7, Delta: 0.1, By: ByType, MinLabels: 1, Method: MethodUniform})
	if err != nil {
		t.Fatal(err)
	}
	want := Group{Model: "service-1.0.0", Type: "noul", Labels: 10, Threshold: .92, HasThreshold: true, Agree: 8, N: 8, LowerBound: math.Pow(0.1, 1.0/8), Coverage: 0.8}
	if got := res.Groups[0]; !groupsEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if lb := LowerBound(8, 9, 0.1); math.Abs(lb-0.6316) > 1e-4 {
		t.Errorf("LB(8, 9) = %v, want 0.6316 by hand", lb)
	}
}

func TestGroups(t *testing.T) {
	line := func(model, typ, question string, conf float64, agree, audit bool) Line {
		return Line{Model: model, Type: typ, Question: question, Confidence: conf, HasConfidence: true, Agree: agree, Audit: audit}
	}
	lines := []Line{
		// Not audited: ignored, however confident and agreeing.
		line("m1", "noul", "a", 1, T, F),
		line("m1", "noul", "a", 1, T, F),
		line("m1", "noul", "a", 1, T, F),
		// m1 noul: "a" has 3 audited lines, "b" 1.
		line("m1", "noul", "a", .9, T, T),
		line("m1", "noul", "a", .8, T, T),
		line("m1", "noul", "a", .7, T, T),
		line("m1", "noul", "b", .9, T, T),
		// m1 score: "s" has 3 lines, all its type's, so its type group is empty.
		line("m1", "score", "s", .9, T, T),
		line("m1", "score", "s", .8, T, T),
		line("m1", "score", "s", .7, F, T),
		// m1 "x" is asked as choice (3 lines) and as noul (1 line).
		line("m1", "choice", "x", .9, T, T),
		line("m1", "choice", "x", .8, T, T),
		line("m1", "choice", "x", .7, T, T),
		line("m1", "noul", "x", .5, F, T),
		// m0 sorts first.
		line("m0", "score", "z", .5, T, T),
	}
	opts := Options{Target: 0.5, Delta: 0.25, By: ByQuestion, MinLabels: 3, Method: MethodUniform}
	res, err := Calibrate(lines, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ignored != 3 {
		t.Errorf("Ignored = %d, want 3", res.Ignored)
	}
	type id struct {
		model, typ, question string
		labels               int
		threshold            float64
	}
	var got []id
	for _, g := range res.Groups {
		got = append(got, id{g.Model, g.Type, g.Question, g.Labels, g.Threshold})
	}
	want := []id{
		{"m0", "score", "", 1, 0},
		// b (1 line < 3) and x's noul line fall back to the type group:
		// .9 b T, .5 x F: (1,2) fails at the start.
		{"m1", "noul", "", 2, 0},
		{"m1", "noul", "a", 3, .7}, // (2,2) .5, (3,3) .63
		// x has 3 choice lines but is also asked as noul: no group of its own.
		{"m1", "choice", "", 3, .7},
		{"m1", "score", "", 0, 0},
		{"m1", "score", "s", 3, .8}, // (2,2) pass, (2,3) fail
	}
	if len(got) != len(want) {
		t.Fatalf("groups:\n%v\nwant\n%v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("group %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], `question "x" of "m1" is asked as noul and choice`) {
		t.Errorf("Notes = %q, want one about x", res.Notes)
	}

	// By type, the same lines make one group per model and type.
	opts.By = ByType
	res, err = Calibrate(lines, opts)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, g := range res.Groups {
		got = append(got, id{g.Model, g.Type, g.Question, g.Labels, g.Threshold})
	}
	// m1 noul: .9 .9 (2,2) pass, .8 (3,3), .7 (4,4), .5 (4,5) 0.5458 pass.
	want = []id{{"m0", "score", "", 1, 0}, {"m1", "noul", "", 5, .5}, {"m1", "choice", "", 3, .7}, {"m1", "score", "", 3, .8}}
	if len(got) != len(want) {
		t.Fatalf("groups:\n%v\nwant\n%v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("by type: group %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if res.Ignored != 3 || len(res.Notes) != 0 {
		t.Errorf("by type: Ignored %d, Notes %q", res.Ignored, res.Notes)
	}
}

func TestOptions(t *testing.T) {
	if err := (Options{Target: 0.9}).Validate(); err == nil {
		t.Error("zero Delta, By and MinLabels passed")
	}
	o := DefaultOptions()
	o.Target = 0.95
	if err := o.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	for _, tt := range []struct {
		change func(*Options)
		want   string
	}{
		{func(o *Options) { o.Target = 1 }, "--target 1 is not between 0 and 1"},
		{func(o *Options) { o.Target = 0 }, "--target 0 is not between 0 and 1"},
		{func(o *Options) { o.Target = math.NaN() }, "--target NaN is not between 0 and 1"},
		{func(o *Options) { o.Delta = 1 }, "--delta 1 is not between 0 and 1"},
		{func(o *Options) { o.Delta = -0.1 }, "--delta -0.1 is not between 0 and 1"},
		{func(o *Options) { o.By = "model" }, `--by "model" is not "type", "question" or "org"`},
		{func(o *Options) { o.MinLabels = 0 }, "--min-labels 0 is less than 1"},
	} {
		o := o
		tt.change(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate() = %v, want %q", err, tt.want)
		}
		if _, err := Calibrate(nil, o); err == nil {
			t.Errorf("Calibrate with %+v: no error", o)
		}
	}
}

func TestMinLinesExtreme(t *testing.T) {
	// Returns (no endless search) and is a start the walk can use.
	for _, tt := range []struct{ target, delta float64 }{
		{0.9999999999999999, 1e-300}, {1e-300, 0.9999999999999999}, {0.5, 1e-300}, {0.9999999, 0.5},
	} {
		if n := MinLines(tt.target, tt.delta); n < 1 {
			t.Errorf("MinLines(%v, %v) = %d", tt.target, tt.delta, n)
		}
	}
}
