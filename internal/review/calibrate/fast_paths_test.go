package calibrate

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// The fast paths of labels_expected and hasThreshold against the
// straightforward computations they replace, kept here as references: on
// random groups both must give exactly the same answers.

// hasThresholdReference is the fallback procedure's walk itself: some
// candidate rejected at the level it is tested at.
func hasThresholdReference(w *walker) bool {
	_, lowest := w.levels()
	return lowest >= 0
}

// expectedReference is labels_expected computed plainly: every future run
// to its end with the whole walker, every candidate fed.
func expectedReference(t *testing.T, w *walker, g groupView, spans []span) (int, bool) {
	if hasThresholdReference(w) {
		return 0, true
	}
	if len(spans) == 0 || !g.expect {
		return 0, false
	}
	rng := rand.New(rand.NewPCG(g.seed, 0x5eed))
	horizon := min(expectHorizon, max(10*len(spans), 100*w.burn))
	counts := make([]int, 0, expectations)
	var buf []obsLine
	for range expectations {
		c := w.clone()
		n := 0
		for n < horizon && !hasThresholdReference(c) {
			var draw Draw
			var replay bool
			buf, draw, replay = g.entry(spans[rng.IntN(len(spans))], buf)
			c.observe(buf, draw, replay)
			n++
			if c.hasThreshold() != hasThresholdReference(c) {
				t.Fatalf("after %d entries of a future: hasThreshold %v, the walk %v", n, c.hasThreshold(), hasThresholdReference(c))
			}
		}
		if !hasThresholdReference(c) {
			n = math.MaxInt
		}
		counts = append(counts, n)
	}
	slices.Sort(counts)
	med := counts[len(counts)/2]
	return med, med != math.MaxInt
}

// randomGroup is one group's lines, in entry order: entries of 1 to most+1
// questions (those above most are refused), confidences on the grid or
// off it, a few without one, agreement at a random rate that may rise
// with confidence; drawn by the active audit when active.
func randomGroup(r *rand.Rand, entries, most int, active bool) []Line {
	rate, slope := 0.5+0.5*r.Float64(), 0.3*r.Float64()
	draw := Draw{P: 0.2, HasP: true}
	var lines []Line
	for e := range entries {
		c := r.Float64()
		if r.IntN(2) == 0 {
			c = math.Round(c*100) / 100
		}
		if active {
			draw = Draw{P: 0.3, HasP: true, Active: true, Floor: 0.05, From: 0.6}
			if c < 0.6 {
				draw.P = 0.05
			}
		}
		for q := range 1 + r.IntN(most+1) {
			qc := min(max(c+0.1*r.NormFloat64(), 0), 1)
			lines = append(lines, Line{Model: "m", Type: "noul", Question: "q" + strconv.Itoa(q),
				Confidence: qc, HasConfidence: r.IntN(30) != 0, Agree: r.Float64() < rate-slope+slope*qc,
				Audit: true, Draw: draw, Replay: active && r.IntN(10) == 0,
				Entry: EntryID{Ms: 1_000 + uint64(e), Set: true}, RequestID: "r" + strconv.Itoa(e)})
		}
	}
	return lines
}

// groupOf reads lines, all of one group in entry order, as walkGroup
// hands them to the walk.
func groupOf(lines []Line, seed uint64, most int) groupView {
	s := NewSample()
	for _, l := range lines {
		s.Add(l)
	}
	return groupView{sample: s, records: s.records, seed: seed, expect: true, maxQuestions: most}
}

// On random groups, labels_expected's futures, fed at the starts only and
// stopped once the median is "never", give exactly what futures of the
// whole walk give; and hasThreshold, reduced to the starts, answers as the
// fallback walk does after every entry of every future.
func TestExpectedMatchesWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	seen := map[bool]int{}
	for run := range 60 {
		target := []float64{0.8, 0.9, 0.95}[r.IntN(3)]
		delta := []float64{0.05, 0.1, 0.2}[r.IntN(3)]
		most := 1 + r.IntN(5)
		weighted := r.IntN(3) == 0
		entries := []int{0, 3, 20, 60, 150}[r.IntN(5)]
		g := groupOf(randomGroup(r, entries, most, weighted), uint64(run), most)
		spans := g.spans()
		w := newWalker(target, delta, weighted, most)
		var buf []obsLine
		for _, sp := range spans {
			var draw Draw
			var replay bool
			buf, draw, replay = g.entry(sp, buf)
			w.observe(buf, draw, replay)
			if w.hasThreshold() != hasThresholdReference(w) {
				t.Fatalf("run %d: hasThreshold %v, the walk %v", run, w.hasThreshold(), hasThresholdReference(w))
			}
		}
		got, gotOK := w.expected(g, spans)
		want, wantOK := expectedReference(t, w, g, spans)
		if got != want || gotOK != wantOK {
			t.Errorf("run %d (target %v delta %v most %d weighted %v, %d entries): expected %d %v, the whole walk %d %v",
				run, target, delta, most, weighted, entries, got, gotOK, want, wantOK)
		}
		seen[wantOK]++
	}
	if seen[true] < 10 || seen[false] < 10 {
		t.Errorf("the runs reached a threshold %d times and not %d times: too few of one to compare", seen[true], seen[false])
	}
}
