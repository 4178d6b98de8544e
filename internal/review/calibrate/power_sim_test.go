package calibrate

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Power: how many audited entries each method needs before it reports a
// threshold. docs/calibration.md ("Power: how many labels") gives the
// figures of
//
//	go test ./internal/review/calibrate/ -run TestPowerFigures -count=1 -v -args -sim.power
//
// and BENCHMARKS.md the command. Without -sim.power only a small smoke
// run checks the machinery against Calibrate itself, and
// TestPowerPlanSimulation the rows of the planned-look table that take
// seconds.
//
// The anytime method is followed entry by entry with its own walker, the
// code Calibrate runs over a group's entries: its evidence at a candidate
// is a running maximum and its starting points are fixed after the
// burn-in, so a threshold once reported stays, and the first entry at
// which Calibrate would report is exactly the first at which the walker
// does. The one-look method is valid for one look at a number of entries
// fixed in advance: power_plan_sim_test.go finds, for each N, the share
// of streams in which one look at exactly N entries reports.

var simPower = flag.Bool("sim.power", false, "print the power figures of docs/calibration.md (a few minutes)")

const (
	powerLookEvery = 5      // entries between the one-look method's looks
	powerHorizon   = 20_000 // entries simulated at most per run
	powerShare     = 0.8    // share of the best coverage the second figure waits for
)

// The curves of the power figures: confidences uniform on the service's
// two-decimal grid.
var (
	// flatCurve: agreement 0.97 at every confidence, so the best threshold
	// covers everything at either target.
	flatCurve = curve{"flat 0.97", func(float64) float64 { return 1 }, func(float64) float64 { return 0.97 }}
	// risingCurve: agreement rising linearly from 0.70 at confidence 0 to
	// 0.98 at 1.
	risingCurve = curve{"rising to 0.98", func(float64) float64 { return 1 }, func(c float64) float64 { return 0.70 + 0.28*c }}
	// halfCurve: agreement 0.6 up to 0.5, then 0.99 above: a judge whose
	// confidence below 0.5 means little; the best threshold covers about
	// half the traffic.
	halfCurve = curve{"half good", func(float64) float64 { return 1 }, func(c float64) float64 {
		if c < 0.5 {
			return 0.6
		}
		return 0.99
	}}
)

// powerRun is what one simulated stream of audited entries gave: the
// entries (counted from 1) at which a figure was first reached, 0 when
// not within the horizon.
type powerRun struct {
	first, covered int
}

// reported records a threshold reported at entry n: the first one, and
// whether its true coverage reaches powerShare of best (then the run is
// done).
func (p *powerRun) reported(n int, g grid, threshold, best float64) (done bool) {
	if p.first == 0 {
		p.first = n
	}
	if _, cov := g.truth(threshold); cov >= powerShare*best {
		p.covered = n
		return true
	}
	return false
}

// entryLines draws one entry of q questions from g: one confidence for
// the entry; with one question its agreement is drawn at that confidence;
// with more, half of the entries have one agreement shared by all their
// questions and the others independent ones, so the questions of an
// entry are correlated while each agrees with the curve's chance.
func (g grid) entryLines(r *rand.Rand, q int, buf []obsLine) []obsLine {
	buf = buf[:0]
	c, agree := g.draw(r)
	shared := q > 1 && r.Float64() < 0.5
	i := int(math.Round(c * 100))
	for j := range q {
		if j > 0 && !shared {
			agree = r.Float64() < g.chance[i]
		}
		buf = append(buf, obsLine{c, agree})
	}
	return buf
}

// anytimeRun follows the anytime method over one stream of entries of q
// questions each, until it covers powerShare of the best coverage or the
// horizon ends.
func anytimeRun(r *rand.Rand, g grid, target, delta float64, q int) powerRun {
	_, best := g.best(target)
	w := newWalker(target, delta, false, q) // max_questions set to the entries' size
	var out powerRun
	var buf []obsLine
	for n := 1; n <= powerHorizon; n++ {
		buf = g.entryLines(r, q, buf)
		w.observe(buf, Draw{}, false)
		_, lowest := w.levels()
		if lowest < 0 {
			continue
		}
		if out.reported(n, g, gridValue(lowest), best) {
			return out
		}
	}
	return out
}

// orgRun is one stream of one-question entries from orgs organizations of
// equal share and the same curve: the entries (all orgs' together) at
// which the pooled group first reports, and at which each org's own
// group first does (as Calibrate with ByOrg computes it: the org's
// entries alone, in entry order), 0 when not within the horizon.
func orgRun(r *rand.Rand, g grid, target, delta float64, orgs int) (pooled int, own []int) {
	pool := newWalker(target, delta, false, 1)
	walkers := make([]*walker, orgs)
	for i := range walkers {
		walkers[i] = newWalker(target, delta, false, 1)
	}
	own = make([]int, orgs)
	left := orgs
	var buf []obsLine
	for n := 1; n <= powerHorizon*orgs && left > 0; n++ {
		buf = g.entryLines(r, 1, buf)
		o := r.IntN(orgs)
		if pooled == 0 {
			pool.observe(buf, Draw{}, false)
			if pool.hasThreshold() {
				pooled = n
			}
		}
		if own[o] == 0 {
			walkers[o].observe(buf, Draw{}, false)
			if walkers[o].hasThreshold() {
				own[o] = n
				left--
			}
		}
	}
	return pooled, own
}

// quantile is the q-quantile of xs (0 meaning "not within the horizon",
// counted as the largest), formatted; "> horizon" when it falls there.
func quantile(xs []int, q float64, horizon int) string {
	s := slices.Clone(xs)
	for i, x := range s {
		if x == 0 {
			s[i] = math.MaxInt
		}
	}
	slices.Sort(s)
	v := s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
	if v == math.MaxInt {
		return "> " + strconv.Itoa(horizon)
	}
	return strconv.Itoa(v)
}

// powerTable runs the anytime method over every curve at each target and
// returns the markdown table of its figures.
func powerTable(runs int, targets []float64, curves []curve) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| curve | target | best threshold (coverage) | method | entries to a first threshold: median, 80th pct | entries to 80%% of the best coverage: median, 80th pct |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|\n")
	for _, c := range curves {
		g := c.grid()
		for _, target := range targets {
			t, best := g.best(target)
			const h = powerHorizon
			rows := []struct {
				name string
				run  func(r *rand.Rand) powerRun
			}{
				{"anytime, 1 question per entry", func(r *rand.Rand) powerRun { return anytimeRun(r, g, target, simDelta, 1) }},
				{"anytime, 5 correlated questions per entry", func(r *rand.Rand) powerRun { return anytimeRun(r, g, target, simDelta, 5) }},
			}
			for _, row := range rows {
				var first, covered []int
				for run := range runs {
					p := row.run(rand.New(rand.NewPCG(uint64(run), 2028)))
					first, covered = append(first, p.first), append(covered, p.covered)
				}
				fmt.Fprintf(&b, "| %s | %.2f | %.2f (%.0f%%) | %s | %s, %s | %s, %s |\n", c.name, target, t, 100*best, row.name,
					quantile(first, 0.5, h), quantile(first, 0.8, h), quantile(covered, 0.5, h), quantile(covered, 0.8, h))
			}
		}
	}
	return b.String()
}

// orgTable is the label cost of a group per organization against a
// pooled one: 4 orgs of equal share and the same curve.
func orgTable(runs int, targets []float64, curves []curve) string {
	const orgs = 4
	var b strings.Builder
	fmt.Fprintf(&b, "| curve | target | pooled group: entries to a first threshold, median (80th pct) | one org's own group: all orgs' entries until it reports, median (80th pct) | all 4 orgs' own groups report: median (80th pct) |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|\n")
	for _, c := range curves {
		g := c.grid()
		for _, target := range targets {
			const h = orgs * powerHorizon // orgRun's horizon, all orgs' entries
			var pooled, each, all []int
			for run := range runs {
				p, own := orgRun(rand.New(rand.NewPCG(uint64(run), 2029)), g, target, simDelta, orgs)
				pooled = append(pooled, p)
				each = append(each, own...)
				last := slices.Max(own)
				if slices.Contains(own, 0) {
					last = 0
				}
				all = append(all, last)
			}
			fmt.Fprintf(&b, "| %s | %.2f | %s (%s) | %s (%s) | %s (%s) |\n", c.name, target,
				quantile(pooled, 0.5, h), quantile(pooled, 0.8, h), quantile(each, 0.5, h), quantile(each, 0.8, h), quantile(all, 0.5, h), quantile(all, 0.8, h))
		}
	}
	return b.String()
}

// TestPowerFigures prints the tables of docs/calibration.md with
// -sim.power (200 runs a row); skipped without it.
func TestPowerFigures(t *testing.T) {
	if !*simPower {
		t.Skip("the power figures run with -args -sim.power")
	}
	const runs = powerRuns
	targets := []float64{0.90, 0.95}
	curves := []curve{flatCurve, risingCurve, halfCurve}
	fmt.Printf("A planned look against anytime, delta %.2f, %d runs a row:\n\n%s\n", simDelta, runs, planTable(runs, targets, curves))
	fmt.Printf("Power, delta %.2f, %d runs a row:\n\n%s\n", simDelta, runs, powerTable(runs, targets, curves))
	fmt.Printf("Label cost per organization, delta %.2f, %d runs a row:\n\n%s\n", simDelta, runs, orgTable(runs, targets, curves))
}

// streamLines replays the stream a seed gives anytimeRun (orgs 0) or
// orgRun (orgs > 0) as `/labels` lines: its first n entries, q questions
// each, with their orgs.
func streamLines(seed uint64, g grid, q, orgs, n int) []Line {
	r := rand.New(rand.NewPCG(seed, 2028))
	var lines []Line
	var buf []obsLine
	for e := range n {
		buf = g.entryLines(r, q, buf)
		org := ""
		if orgs > 0 {
			org = "o" + strconv.Itoa(r.IntN(orgs))
		}
		for j, l := range buf {
			line := simLine(e, j, l.confidence, l.agree)
			line.Org = org
			lines = append(lines, line)
		}
	}
	return lines
}

// groupFor calibrates lines and returns the group of org ("" for the
// pooled one).
func groupFor(t *testing.T, lines []Line, target float64, by, org, method string, most int) Group {
	t.Helper()
	res, err := Calibrate(lines, Options{Target: target, Delta: simDelta, By: by, MinLabels: 1, Method: method, MaxQuestions: most})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range res.Groups {
		if g.Org == org && g.Question == "" {
			return g
		}
	}
	t.Fatalf("no group for org %q", org)
	return Group{}
}

// The smoke run of the power figures, by default: the walkers the figures
// follow report exactly when Calibrate does (the anytime method on the
// first entry at which it reports and not one entry before, for one
// question and five per entry, pooled and per org, and with the default
// correction window on labels a day apart from the next day's, exactly
// when the complete prefix reaches that entry; the planned look's verdict
// at any number of entries); and with every entry agreeing at one
// confidence, the anytime method's median entries to a first threshold is
// within twice what one planned look needs, as BurnIn is designed to give.
func TestPowerSmoke(t *testing.T) {
	for _, q := range []int{1, 5} {
		g := risingCurve.grid()
		p := anytimeRun(rand.New(rand.NewPCG(7, 2028)), g, 0.9, simDelta, q)
		if p.first == 0 {
			t.Fatalf("%d questions: no threshold within %d entries", q, powerHorizon)
		}
		at := groupFor(t, streamLines(7, g, q, 0, p.first), 0.9, ByType, "", MethodAnytime, q)
		before := groupFor(t, streamLines(7, g, q, 0, p.first-1), 0.9, ByType, "", MethodAnytime, q)
		if !at.HasThreshold || before.HasThreshold {
			t.Errorf("%d questions: the walker reports at entry %d; Calibrate there %v, one entry before %v", q, p.first, at.HasThreshold, before.HasThreshold)
		}
		checkWindow(t, g, q, p.first)
	}

	g := flatCurve.grid()
	pooled, own := orgRun(rand.New(rand.NewPCG(7, 2028)), g, 0.9, simDelta, 4)
	if pooled == 0 || slices.Contains(own, 0) {
		t.Fatalf("pooled %d, orgs %v: a group without a threshold within the horizon", pooled, own)
	}
	check := func(by, org string, n int) {
		at := groupFor(t, streamLines(7, g, 1, 4, n), 0.9, by, org, MethodAnytime, 1)
		before := groupFor(t, streamLines(7, g, 1, 4, n-1), 0.9, by, org, MethodAnytime, 1)
		if !at.HasThreshold || before.HasThreshold {
			t.Errorf("org %q: the walker reports at entry %d; Calibrate there %v, one entry before %v", org, n, at.HasThreshold, before.HasThreshold)
		}
	}
	check(ByType, "", pooled)
	for o, n := range own {
		check(ByOrg, "o"+strconv.Itoa(o), n)
	}

	checkPlannedLook(t, halfCurve.grid())

	for _, c := range []curve{flatCurve, {"all agreeing at confidence 1", func(c float64) float64 {
		if c == 1 {
			return 1
		}
		return 0
	}, func(float64) float64 { return 1 }}} {
		u, a := planRow(20, c.grid(), 0.9, simDelta)
		t.Logf("%s at 0.90, 20 runs: entries for a threshold with probability 50%%: one planned look %d, anytime %d", c.name, u[0], a[0])
		if c.name != flatCurve.name && (a[0] == 0 || u[0] == 0 || a[0] > 2*u[0]) {
			t.Errorf("every entry agreeing: anytime's median %d entries to a first threshold is not within twice the %d of a planned look", a[0], u[0])
		}
	}
}

// checkWindow: with the default options (labels final after a day), the
// anytime method reports once the complete prefix holds its first
// reporting entry n, counted as the walker counts: a look a day after
// entry n was labelled reports, one a nanosecond sooner does not, while
// the day's newer labels wait.
func checkWindow(t *testing.T, g grid, q, n int) {
	t.Helper()
	const every = 10 * time.Minute // one entry labelled every 10 minutes
	lines := streamLines(7, g, q, 0, n+int(DefaultCorrectWithin/every)+5)
	for i := range lines {
		e := lines[i].Entry.Ms - simBase
		lines[i].Labelled = simStart.Add(time.Duration(e) * every).UnixNano()
	}
	labelledN := simStart.Add(time.Duration(n-1) * every) // entry n is the (n-1)th from 0
	for _, look := range []struct {
		at   time.Time
		want bool
	}{{labelledN.Add(DefaultCorrectWithin), true}, {labelledN.Add(DefaultCorrectWithin - 1), false}} {
		opts := DefaultOptions()
		opts.Target, opts.Delta, opts.MaxQuestions, opts.AsOf = 0.9, simDelta, q, look.at
		res, err := Calibrate(lines, opts)
		if err != nil {
			t.Fatal(err)
		}
		if g := res.Groups[0]; g.HasThreshold != look.want || g.Waiting == 0 {
			t.Errorf("%d questions, a look at %v: threshold %v, %d labels waiting; want %v, some waiting", q, look.at, g.HasThreshold, g.Waiting, look.want)
		}
	}
}

// checkPlannedLook: the planned-look table's verdict over the grid
// counts of a stream's first N entries is Calibrate's under the uniform
// method over those entries, for N from the start of the walk to
// hundreds, reporting and not, on a few streams.
func checkPlannedLook(t *testing.T, g grid) {
	t.Helper()
	nmin := MinLines(0.9, simDelta)
	seen := map[bool]int{}
	passes := boundPasses{}
	for seed := uint64(7); seed < 11; seed++ {
		r := rand.New(rand.NewPCG(seed, 2028))
		var n, k [gridSteps + 1]int
		var buf []obsLine
		for e := 1; e <= 600; e++ {
			buf = g.entryLines(r, 1, buf)
			c := int(math.Round(buf[0].confidence * gridSteps))
			n[c]++
			if buf[0].agree {
				k[c]++
			}
			if e < nmin || e%41 != 0 && e != nmin {
				continue
			}
			got := lookReports(&n, &k, 0.9, simDelta, nmin, passes)
			if want := groupFor(t, streamLines(seed, g, 1, 0, e), 0.9, ByType, "", MethodUniform, 1).HasThreshold; got != want {
				t.Errorf("stream %d, one look at %d entries: the table's walk %v, Calibrate %v", seed, e, got, want)
			}
			seen[got]++
		}
	}
	if seen[true] < 3 || seen[false] < 3 {
		t.Errorf("looks reporting and not: %v; the check compares too few of one", seen)
	}
}
