package calibrate

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
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
// off it, a few without one, agreement at confidence 1 from a little
// below target to 1, falling with confidence at a random slope (every
// answer agreeing when agreeing); drawn by the active audit when active.
func randomGroup(r *rand.Rand, target float64, entries, most int, active, agreeing bool) []Line {
	rate, slope := min(target-0.1+(1.1-target)*r.Float64(), 1), 0.3*r.Float64()
	if agreeing {
		rate, slope = 1, 0
	}
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
	seen := map[string]int{}
	for run := range 40 {
		target := []float64{0.8, 0.9, 0.95}[r.IntN(3)]
		delta := []float64{0.05, 0.1, 0.2}[r.IntN(3)]
		most := 1 + r.IntN(5)
		weighted := r.IntN(3) == 0
		entries := []int{0, 3, 20, 60, 150, 300}[r.IntN(6)]
		agreeing := run%4 == 0 // most of them have a threshold already
		if agreeing {
			entries = 300
		}
		g := groupOf(randomGroup(r, target, entries, most, weighted, agreeing), uint64(run), most)
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
		seen[outcome(want, wantOK)]++
	}
	checkOutcomes(t, seen, "already", "ahead", "never")
}

// outcome names what labels_expected found: a threshold already, one
// some futures away, or none within the horizon.
func outcome(n int, ok bool) string {
	switch {
	case !ok:
		return "never"
	case n == 0:
		return "already"
	}
	return "ahead"
}

// checkOutcomes fails unless the random groups gave each outcome a few
// times: a comparison that never met one proves nothing about it.
func checkOutcomes(t *testing.T, seen map[string]int, want ...string) {
	t.Helper()
	for _, o := range want {
		if seen[o] < 3 {
			t.Errorf("outcomes %v: %q fewer than 3 times", seen, o)
		}
	}
}

// expectedUniformReference is the uniform method's labels_expected
// computed plainly: at each checkpoint of each future the whole walk over
// every line so far.
func expectedUniformReference(g groupView, m tally, target, delta float64) (int, bool) {
	spans := g.spans()
	if len(spans) == 0 || m.labels > uniformExpectMaxLines {
		return 0, false
	}
	nmin := MinLines(target, delta)
	rng := rand.New(rand.NewPCG(g.seed, 0x5eed))
	horizon := min(expectHorizon, max(10*len(spans), 10*nmin))
	counts := make([]int, 0, expectations)
	var buf []obsLine
	for range expectations {
		scored := slices.Clone(m.scored)
		labels := m.labels
		n, found := 0, false
		for next := 1; n < horizon && !found; next = max(next+1, next*21/20) {
			for ; n < next; n++ {
				buf, _, _ = g.entry(spans[rng.IntN(len(spans))], buf)
				labels += len(buf)
				for _, l := range buf {
					if l.confidence >= 0 {
						scored = append(scored, point(l))
					}
				}
			}
			t := tally{labels: labels, scored: slices.Clone(scored)}
			found = t.walk(target, delta, nmin).HasThreshold
		}
		if !found {
			n = math.MaxInt
		}
		counts = append(counts, n)
	}
	slices.Sort(counts)
	med := counts[len(counts)/2]
	return med, med != math.MaxInt
}

// On random groups, the uniform method's labels_expected, counted by
// confidence with one bound a checkpoint, gives exactly what the whole
// walk at every checkpoint gives.
func TestExpectedUniformMatchesWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	seen := map[string]int{}
	for run := range 40 {
		target := []float64{0.8, 0.9, 0.95}[r.IntN(3)]
		delta := []float64{0.05, 0.1, 0.2}[r.IntN(3)]
		entries := []int{0, 1, 5, 20, 40, 80}[r.IntN(6)]
		g := groupOf(randomGroup(r, target, entries, 3, false, false), uint64(run), 3)
		m := tally{labels: len(g.records)}
		for i := range g.records {
			if rec := &g.records[i]; rec.is(hasConfidence) {
				m.scored = append(m.scored, point{rec.confidence, rec.is(agrees)})
			}
		}
		got, gotOK := g.expectedUniform(m, target, delta)
		want, wantOK := expectedUniformReference(g, m, target, delta)
		if got != want || gotOK != wantOK {
			t.Errorf("run %d (target %v delta %v, %d entries): expected %d %v, the whole walk %d %v", run, target, delta, entries, got, gotOK, want, wantOK)
		}
		seen[outcome(want, wantOK)]++
	}
	checkOutcomes(t, seen, "ahead", "never") // called only without a threshold: none "already"
}

// dedupeReference is dedupe by sorting: the records by key, the kept line
// first of each key, then back in input order.
func dedupeReference(s *Sample) {
	slices.SortFunc(s.records, func(a, b compactLine) int {
		ua, ub := a.is(unkeyed), b.is(unkeyed)
		if ua || ub {
			if ua && ub {
				return cmp.Compare(a.index, b.index)
			}
			if ua {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.key[0], b.key[0]), cmp.Compare(a.key[1], b.key[1]), dedupeOrder(&a, &b))
	})
	kept := s.records[:0]
	var prev [2]uint64
	for i, r := range s.records {
		if i > 0 && !r.is(unkeyed) && r.key == prev {
			s.duplicates++
			continue
		}
		prev = r.key
		kept = append(kept, r)
	}
	s.records = kept
	slices.SortFunc(s.records, func(a, b compactLine) int { return cmp.Compare(a.index, b.index) })
	for i := range s.records {
		s.records[i].index = uint32(i)
	}
}

// randomExport is lines of several versions, types and orgs, entries out
// of order now and then, with copies: the same request id again (a cached
// answer), a line exported twice, a label and its correction, lines with
// no request id or no entry.
func randomExport(r *rand.Rand, n int) []Line {
	var lines []Line
	for len(lines) < n {
		e := r.IntN(n)
		l := Line{Model: "m" + strconv.Itoa(r.IntN(2)), Type: typeOrder[r.IntN(3)], Question: "q" + strconv.Itoa(r.IntN(3)),
			Confidence: float64(r.IntN(101)) / 100, HasConfidence: r.IntN(20) != 0, Agree: r.IntN(5) != 0, Audit: r.IntN(10) != 0,
			Entry: EntryID{Ms: uint64(1000 + e), Seq: uint64(r.IntN(2)), Set: r.IntN(30) != 0}, RequestID: "r" + strconv.Itoa(e/2),
			Labelled: int64(r.IntN(5)), Org: "o" + strconv.Itoa(r.IntN(3)), Pending: r.IntN(40) == 0}
		if r.IntN(10) == 0 {
			l.RequestID = ""
		}
		lines = append(lines, l)
		if r.IntN(5) == 0 { // exported twice, or corrected
			c := l
			c.Labelled, c.Agree = int64(r.IntN(5)), r.IntN(2) == 0
			lines = append(lines, c)
		}
	}
	return lines
}

// dedupe in one pass keeps exactly the lines, in the order and with the
// numbers, that sorting by key keeps; also for a sample calibrated once
// (its records reordered) and then added to.
func TestDedupeMatchesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for run := range 50 {
		lines := randomExport(r, 1+r.IntN(400))
		fast, slow := NewSample(), NewSample()
		for _, l := range lines {
			fast.Add(l)
		}
		if run%2 == 1 { // calibrated, then more lines
			if _, err := fast.Calibrate(Options{Target: 0.9, Delta: 0.1, By: ByOrg, MinLabels: 3, Method: MethodUniform}); err != nil {
				t.Fatal(err)
			}
			for _, l := range randomExport(r, 50) {
				fast.Add(l)
			}
		}
		slow.records, slow.duplicates = slices.Clone(fast.records), fast.duplicates
		fast.dedupe()
		dedupeReference(slow)
		if !slices.Equal(fast.records, slow.records) || fast.duplicates != slow.duplicates {
			t.Fatalf("run %d: dedupe kept %d records (%d duplicates), sorting by key %d (%d)",
				run, len(fast.records), fast.duplicates, len(slow.records), slow.duplicates)
		}
	}
}

// Records in entry order, put by group in one counting pass, end in the
// order sorting by group then entry order gives, for every grouping.
func TestBucketRecordsMatchesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	for run := range 30 {
		s := NewSample()
		for _, l := range randomExport(r, 1+r.IntN(600)) {
			s.Add(l)
		}
		opts := Options{Target: 0.9, Delta: 0.1, By: []string{ByType, ByQuestion, ByOrg}[run%3], MinLabels: 1 + r.IntN(20)}
		s.dedupe()
		s.markComplete(0, 0)
		gs := s.groups(opts, &Result{})
		sorted := slices.Clone(s.records)
		slices.SortFunc(sorted, func(a, b compactLine) int { return cmp.Or(cmp.Compare(gs.of(&a), gs.of(&b)), entryOrder(a, b)) })
		gs.bucketRecords(s)
		if !slices.Equal(s.records, sorted) {
			t.Fatalf("run %d (by %s): the counting pass and the sort differ", run, opts.By)
		}
	}
}

// Lines parsed a batch at a time on several goroutines are the lines
// parsed one by one, in order; a bad line is named by its number (blank
// lines counted) with the error parsing it alone gives, the lines before
// it kept; and AddStored stops at the same line with the same error.
func TestParallelParseMatchesSerial(t *testing.T) {
	lines := randomExport(rand.New(rand.NewPCG(19, 20)), 5000)
	for i := range lines {
		lines[i].Labelled = int64(i) * 1e9 // a `ts` to write
	}
	text := benchNDJSON(lines)
	texts := strings.Split(strings.TrimSuffix(string(text), "\n"), "\n")
	texts[7] = "   " // a blank line, skipped but counted
	for _, bad := range []int{-1, 3, 2500, 4999} {
		in := slices.Clone(texts)
		if bad >= 0 {
			in[bad] = strings.Replace(in[bad], `"type":"`, `"type":"x`, 1)
		}
		var want []Line
		var wantErr string
		for i, text := range in {
			if strings.TrimSpace(text) == "" {
				continue
			}
			l, err := parseLine([]byte(text))
			if err != nil {
				wantErr = fmt.Sprintf("line %d: %v", i+1, err)
				break
			}
			want = append(want, l)
		}
		got, err := ReadLines(strings.NewReader(strings.Join(in, "\n")))
		if fmt.Sprint(err) != fmt.Sprint(cmp.Or(wantErr, "<nil>")) || (bad < 0 && !slices.Equal(got, want)) {
			t.Errorf("bad line %d: ReadLines gave %d lines, %v; one by one %d, %s", bad, len(got), err, len(want), wantErr)
		}
		s := NewSample()
		stored := slices.DeleteFunc(slices.Clone(in), func(s string) bool { return strings.TrimSpace(s) == "" })
		at, err := s.AddStored(stored)
		if wantErr == "" && (err != nil || at != len(stored) || s.Lines() != len(want)) {
			t.Errorf("AddStored: %d, %v, %d lines; want all %d", at, err, s.Lines(), len(want))
		}
		if wantErr != "" && (err == nil || fmt.Sprintf("line %d: %v", bad+1, err) != wantErr || s.Lines() != len(want) || at != len(want)) {
			t.Errorf("AddStored: stopped at %d with %v, %d lines; want %s after %d", at, err, s.Lines(), wantErr, len(want))
		}
	}
}
