package calibrate

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestReadDraw(t *testing.T) {
	ok := map[string]Draw{
		`{"other":1}`:      {},
		`{"audit_p":0.05}`: {P: 0.05, HasP: true},
		`{"audit_p":null}`: {},
		`{"audit_p":0.1,"audit_floor":0.01,"audit_from":0.6}`: {P: 0.1, HasP: true, Active: true, Floor: 0.01, From: 0.6},
		`{"audit_p":0.01,"audit_floor":0.01,"audit_from":0}`:  {P: 0.01, HasP: true, Active: true, Floor: 0.01},
	}
	for extra, want := range ok {
		l, err := parseLine([]byte(`{"model":"m","type":"noul","question":"q","agree":true,"audit":true,"confidence":0.5` +
			strings.Replace(extra, "{", ",", 1)))
		if err != nil || l.Draw != want {
			t.Errorf("%s: %+v %v, want %+v", extra, l.Draw, err, want)
		}
	}
	for extra, want := range map[string]string{
		`"audit_p":"0.05"}`:                                 `"audit_p" is "0.05", want a number from 0 to 1`,
		`"audit_p":1.5}`:                                    `"audit_p" is 1.5`,
		`"audit_p":0.1,"audit_floor":0.01}`:                 "come together",
		`"audit_floor":0.01,"audit_from":0.5}`:              `"audit_floor" without "audit_p"`,
		`"audit_p":0.01,"audit_floor":0.1,"audit_from":0}`:  `"audit_floor" 0.1 is not above 0 and at most "audit_p" 0.01`,
		`"audit_p":0.1,"audit_floor":0,"audit_from":0}`:     `"audit_floor" 0 is not above 0`,
		`"audit_p":0.1,"audit_floor":0.01,"audit_from":-1}`: `"audit_from" is -1`,
	} {
		_, err := parseLine([]byte(`{"model":"m","type":"noul","question":"q","agree":true,"audit":true,"confidence":0.5,` + extra))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", extra, err, want)
		}
	}
}

// Each method refuses what it cannot read validly; the uniform method
// never takes lines of the active audit, or of several probabilities, as
// uniform.
func TestCheckDraws(t *testing.T) {
	line := func(d Draw) Line {
		return Line{Model: "m", Type: "noul", Question: "q", Confidence: 0.9, HasConfidence: true, Agree: true, Audit: true, Draw: d}
	}
	uniform := line(Draw{P: 0.05, HasP: true})
	other := line(Draw{P: 0.1, HasP: true})
	active := line(Draw{P: 0.1, HasP: true, Active: true, Floor: 0.01, From: 0.5})
	old := line(Draw{})
	for _, tc := range []struct {
		lines  []Line
		method string
		want   string // "" for accepted
	}{
		{[]Line{uniform, uniform, old}, MethodUniform, ""},
		{[]Line{uniform, other}, MethodUniform, "different probabilities (audit_p from 0.05 to 0.1): the uniform method assumes one; run with --method weighted"},
		{[]Line{active, active}, "", "2 audited lines were drawn by the active audit"},
		{[]Line{uniform, other, active}, MethodWeighted, ""},
		{[]Line{old, old}, MethodWeighted, ""},
		{[]Line{old, active}, MethodWeighted, "1 of 2 audited lines have no audit_p"},
		{[]Line{line(Draw{HasP: true})}, MethodWeighted, "audit_p 0"},
	} {
		_, err := Calibrate(tc.lines, Options{Target: 0.9, Delta: 0.05, By: ByType, MinLabels: 1, Method: tc.method})
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s on %v: %v, want %q", tc.method, tc.lines, err, tc.want)
		}
		// The refusals the weighted method answers are told apart by
		// errors.Is (the review page falls back to it), no other.
		if needs := tc.method != MethodWeighted && tc.want != ""; needs != errors.Is(err, ErrNeedsWeighted) {
			t.Errorf("%s on %v: %v, errors.Is ErrNeedsWeighted %v, want %v", tc.method, tc.lines, err, !needs, needs)
		}
	}
	if err := (Options{Target: 0.9, Delta: 0.05, By: ByType, MinLabels: 1, Method: "clever"}).Validate(); err == nil || !strings.Contains(err.Error(), `--method "clever"`) {
		t.Errorf("unknown method: %v", err)
	}
}

// Lines drawn uniformly are the special case of weight 1/f: the weighted
// method gives them the anytime method's result, group by group, with and
// without audit_p, by type and by question (coverage to rounding: weights
// of 1/audit_p against counts).
func TestWeightedAgreesOnUniformLines(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	g := logisticCurve.grid()
	var lines []Line
	for i := range 3000 {
		c, agree := g.draw(r)
		l := Line{Model: []string{"m1", "m2"}[i%2], Type: typeOrder[i%3], Question: []string{"a", "b", "c", "d"}[r.IntN(4)],
			Confidence: c, HasConfidence: i%50 != 0, Agree: agree, Audit: i%7 != 0, Draw: Draw{P: 0.05, HasP: true}}
		lines = append(lines, l)
	}
	for _, by := range []string{ByType, ByQuestion} {
		for _, strip := range []bool{false, true} {
			if strip {
				for i := range lines {
					lines[i].Draw = Draw{}
				}
			}
			opts := Options{Target: 0.9, Delta: 0.05, By: by, MinLabels: 100, Method: MethodAnytime, MaxQuestions: 1}
			want, err := Calibrate(lines, opts)
			if err != nil {
				t.Fatal(err)
			}
			opts.Method = MethodWeighted
			got, err := Calibrate(lines, opts)
			if err != nil {
				t.Fatal(err)
			}
			got.Method = want.Method
			for i := range got.Groups {
				if i < len(want.Groups) && math.Abs(got.Groups[i].Coverage-want.Groups[i].Coverage) < 1e-12 {
					got.Groups[i].Coverage = want.Groups[i].Coverage
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("by %s, audit_p stripped %v: weighted\n%+v\nanytime\n%+v", by, strip, got, want)
			}
			if with := 0; true {
				for _, grp := range want.Groups {
					if grp.HasThreshold {
						with++
					}
				}
				if with < 3 {
					t.Errorf("by %s: only %d groups with a threshold: the comparison shows little", by, with)
				}
			}
		}
	}
}

// Below from, the weighted method weighs: a draw that favours agreeing
// answers (share at or above from, where they agree) cannot lift a
// threshold below from, where the traffic disagrees, and the coverage is
// the traffic's, not the sample's.
func TestWeightedWeighs(t *testing.T) {
	d := design{share: 1, floor: 0.05, from: 0.5}
	var lines []Line
	// Traffic: 1,000 answers at 0.9 (all agree), 1,000 at 0.3 (70% agree).
	// Drawn: all at 0.9, 50 at 0.3, of which 35 agree.
	for i := range 1000 {
		lines = append(lines, d.line(0.9, true))
		if i < 50 {
			lines = append(lines, d.line(0.3, i < 35))
		}
	}
	// In the order drawn: independent draws, so a random order.
	rand.New(rand.NewPCG(1, 1)).Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
	res, err := Calibrate(lines, Options{Target: 0.9, Delta: 0.05, By: ByType, MinLabels: 1, Method: MethodWeighted, MaxQuestions: 1})
	if err != nil {
		t.Fatal(err)
	}
	g := res.Groups[0]
	// True agreement at 0.3 is 0.85: below target, and the e-process must
	// not pass it; any candidate above 0.3 holds the answers at 0.9 only,
	// all agreeing, and passes (the lowest, 0.31, is the threshold).
	if !g.HasThreshold || g.Threshold <= 0.3 || g.Threshold > 0.9 || g.N+BurnIn(0.9, 0.05) < 1000 || g.Coverage != 1000.0/(1000+50*20) {
		t.Errorf("group %+v, want a threshold in (0.3, 0.9] over the answers at 0.9, coverage 0.5", g)
	}
	// Unweighted, the same lines look like 1035/1050 = 0.986 agreement at
	// 0.3: the uniform method would pass it, which is why it refuses.
	if _, err := Calibrate(lines, Options{Target: 0.9, Delta: 0.05, By: ByType, MinLabels: 1}); err == nil {
		t.Error("the uniform method took lines of the active audit")
	}
}

// The betting bound is at or above the target exactly when the candidate
// passed, and the e-process passes a candidate whose weighted agreement is
// well above target.
func TestWeightedBettingBound(t *testing.T) {
	d := design{share: 0.5, floor: 0.1, from: 0.8}
	var lines []Line
	for i := range 2000 {
		// Drawn: 1,000 at 0.9 (weight 2), 95% agree; 1,000 at 0.6 (weight
		// 10), all agree: the traffic's agreement at or above 0.6 is
		// (2*950 + 10*1000) / (2*1000 + 10*1000) = 0.9917.
		c := []float64{0.9, 0.6}[i%2]
		lines = append(lines, d.line(c, c == 0.6 || i%40 != 0))
	}
	res, err := Calibrate(lines, Options{Target: 0.9, Delta: 0.05, By: ByType, MinLabels: 1, Method: MethodWeighted, MaxQuestions: 1})
	if err != nil {
		t.Fatal(err)
	}
	g := res.Groups[0]
	// Every candidate at or below 0.6 holds all the answers: the lowest
	// of the grid, 0, is the threshold.
	if !g.HasThreshold || g.Threshold > 0.6 || g.LowerBound < 0.9 || g.LowerBound > 0.9917 || g.Coverage != 1 {
		t.Errorf("group %+v: want a threshold at or below 0.6 with a betting bound in [0.9, 0.9917], coverage 1", g)
	}
	// At 0.995, above the truth, 0.6 must fail; 0.9 (95%) fails too.
	res, _ = Calibrate(lines, Options{Target: 0.995, Delta: 0.05, By: ByType, MinLabels: 1, Method: MethodWeighted, MaxQuestions: 1})
	if g := res.Groups[0]; g.HasThreshold || g.LowerBound >= 0.995 {
		t.Errorf("target 0.995: %+v", g)
	}
}

func TestCommandMethod(t *testing.T) {
	in := `{"model":"m","type":"noul","question":"q","agree":true,"audit":true,"confidence":0.9,"audit_p":0.1,"audit_floor":0.01,"audit_from":0.5}` + "\n"
	_, _, err := runCommand(t, strings.NewReader(strings.Repeat(in, 40)), "--target", "0.9", "-")
	if err == nil || !strings.Contains(err.Error(), "--method weighted") {
		t.Errorf("default method on active lines: %v", err)
	}
	out, _, err := runCommand(t, strings.NewReader(strings.Repeat(in, 50)), "--target", "0.9", "--method", "weighted", "--max-questions", "1", "-")
	if err != nil || !strings.Contains(out, "\t\tnoul ") {
		t.Errorf("--method weighted: %v\n%s", err, out)
	}
}
