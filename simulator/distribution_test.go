package simulator

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

func sum(parts []int) int {
	s := 0
	for _, p := range parts {
		s += p
	}
	return s
}

// TestWorkedCheck is the seed's worked check of the numeric rules.
func TestWorkedCheck(t *testing.T) {
	choice := []int{20, 60, 20}
	if got := formatDerived(choiceConfidence(choice)); got != "0.4" {
		t.Errorf("3 options with peak 0.6: confidence %s, want 0.4", got)
	}
	tiers := []int{4, 23, 61, 12}
	if got := formatHundredths(scoreOf(tiers)); got != "1.81" {
		t.Errorf("tiers 0..3 with 0.04 0.23 0.61 0.12: score %s, want 1.81", got)
	}
	if got := formatHundredths(tiers[argmax(tiers)]); got != "0.61" {
		t.Errorf("score confidence %s, want 0.61", got)
	}
}

func TestChoiceConfidenceFormula(t *testing.T) {
	for _, tc := range []struct {
		dist []int
		want string
	}{
		{[]int{100}, "1"},
		{[]int{100, 0}, "1"},
		{[]int{50, 50}, "0"},
		{[]int{25, 25, 25, 25}, "0"},
		{[]int{34, 33, 33}, "0.01"},
		{[]int{30, 20, 10, 10, 10, 10, 10}, "0.1833"},     // (7*0.3-1)/6
		{[]int{0, 0, 55, 45}, "0.4"},                      // (4*0.55-1)/3
		{[]int{70, 30}, "0.4"},                            // (2*0.7-1)/1
		{[]int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 90}, "0.89"}, // (11*0.9-1)/10
	} {
		if got := formatDerived(choiceConfidence(tc.dist)); got != tc.want {
			t.Errorf("choiceConfidence(%v) = %s, want %s", tc.dist, got, tc.want)
		}
	}
}

func TestApportion(t *testing.T) {
	for _, tc := range []struct {
		weights []float64
		total   int
		want    []int
	}{
		{[]float64{1, 1, 1}, 100, []int{34, 33, 33}},
		{[]float64{0, 0}, 100, []int{50, 50}},
		{[]float64{1, 3}, 100, []int{25, 75}},
		{[]float64{0.604, 0.396}, 100, []int{60, 40}},
		{[]float64{2, 1}, 0, []int{0, 0}},
		{[]float64{}, 100, []int{}},
	} {
		got := apportion(tc.weights, tc.total)
		if len(got) != len(tc.want) {
			t.Fatalf("apportion(%v, %d) = %v, want %v", tc.weights, tc.total, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("apportion(%v, %d) = %v, want %v", tc.weights, tc.total, got, tc.want)
				break
			}
		}
	}
}

// TestDistributionsSumToOne draws many distributions of every size the seed
// allows: each must be whole hundredths summing to exactly 1.
func TestDistributionsSumToOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		n := 1 + rng.IntN(255)
		if i%2 == 0 {
			n = 1 + rng.IntN(10) // the common sizes, more often
		}
		dist := naturalDistribution(rng, n)
		if len(dist) != n || sum(dist) != 100 {
			t.Fatalf("naturalDistribution(n=%d) = %v: sum %d", n, dist, sum(dist))
		}
		for _, p := range dist {
			if p < 0 {
				t.Fatalf("naturalDistribution(n=%d) = %v: negative part", n, dist)
			}
		}

		peak := minPeak(n) + rng.IntN(100-minPeak(n)+1)
		dist = distributionWithPeak(rng, n, peak)
		if len(dist) != n || sum(dist) != 100 || dist[argmax(dist)] != peak {
			t.Fatalf("distributionWithPeak(n=%d, peak=%d) = %v: sum %d", n, peak, dist, sum(dist))
		}
		for _, p := range dist {
			if p < 0 {
				t.Fatalf("distributionWithPeak(n=%d, peak=%d) = %v: negative part", n, peak, dist)
			}
		}

		if p := naturalNoul(rng); p < 0 || p > 100 {
			t.Fatalf("naturalNoul = %d", p)
		}
	}
}

// TestNaturalAnswersVary guards against a generator that always answers the
// same way: tests of routing need both confident and unsure answers.
func TestNaturalAnswersVary(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var confident, unsure int
	for range 1000 {
		c := choiceConfidence(naturalDistribution(rng, 3))
		switch {
		case c >= 0.8:
			confident++
		case c <= 0.4:
			unsure++
		}
	}
	if confident < 100 || unsure < 100 {
		t.Errorf("of 1000 choice answers, %d have confidence >= 0.8 and %d <= 0.4; want at least 100 of each", confident, unsure)
	}
}

func TestPeakForTarget(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  int
		want int
	}{
		{"choice n=3 c=0.4", peakForChoice(3, 0.4), 60},
		{"choice n=4 c=0.4", peakForChoice(4, 0.4), 55},
		{"choice n=3 c=0.5 (nearest)", peakForChoice(3, 0.5), 67},
		{"choice n=3 c=0 (nearest)", peakForChoice(3, 0), 34},
		{"choice n=2 c=0", peakForChoice(2, 0), 50},
		{"choice n=1 c=0", peakForChoice(1, 0), 100},
		{"choice n=255 c=0", peakForChoice(255, 0), 1},
		{"choice n=2 c=1", peakForChoice(2, 1), 100},
		{"score n=4 c=0.61", peakForScore(4, 0.61), 61},
		{"score n=3 c=0.2 (nearest)", peakForScore(3, 0.2), 34},
		{"score n=10 c=0.1", peakForScore(10, 0.1), 10},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: peak %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

func TestTextTokens(t *testing.T) {
	for _, tc := range []struct {
		text string
		want int64
	}{
		{"", 0},
		{"   \n\t", 0},
		{"abcd", 1},
		{"abcde", 2},
		{"hello, world!", 6}, // hello(2) ,(1) world(2) !(1)
		{"你好世界", 4},
		{"price 42元", 4},   // price(2) 42(1) 元(1)
		{"café", 2},        // caf(1) é(1)
		{"GPT-4o mini", 4}, // GPT(1) -(1) 4o(1) mini(1)
	} {
		if got := textTokens(tc.text); got != tc.want {
			t.Errorf("textTokens(%q) = %d, want %d", tc.text, got, tc.want)
		}
	}
}

func TestCountTokens(t *testing.T) {
	for _, tc := range []struct {
		json string
		want int64
	}{
		{``, 0},
		{`null`, 0},
		{`"abcd"`, 1},
		{`{"key": "value", "n": 12, "b": true, "x": null}`, 8},
		{`["\u4f60\u597d", "你好"]`, 4}, // escapes count as the characters they stand for
		{`{"good": null, "bad": null}`, 2},
	} {
		if got := countTokens(json.RawMessage(tc.json)); got != tc.want {
			t.Errorf("countTokens(%s) = %d, want %d", tc.json, got, tc.want)
		}
	}
}
