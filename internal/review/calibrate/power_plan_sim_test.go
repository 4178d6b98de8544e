package calibrate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The planned one look against the default method: for each curve of the
// power figures and each target, the fewest entries N, fixed in advance,
// at which one `uniform` run over the first N entries reports a threshold
// with probability 50% and 80% (the share of runs that report at exactly
// N, over every N), and the fewest entries by which `anytime`, looked at
// after every entry, has reported with those probabilities. Both read the
// same streams (one question per entry, seeds as anytimeRun's), so the
// ratios compare like with like. docs/calibration.md ("Power: how many
// labels") gives the table TestPowerFigures prints; TestPowerPlanSimulation
// recomputes its cheaper rows and holds the page to them.

// powerChances are the probabilities of the planned-look table.
var powerChances = [2]float64{0.5, 0.8}

// planRun is one stream of the lockstep: the one-look method's counts at
// each grid point so far, and the default method's walker.
type planRun struct {
	r        *rand.Rand
	n, k     [gridSteps + 1]int
	w        *walker
	reported bool
}

// planRow runs runs streams in lockstep, entry by entry, until both
// methods reach the higher chance or the horizon ends, and returns for
// each chance the entries at which each method first reaches it (0: not
// within the horizon).
func planRow(runs int, g grid, target, delta float64) (uniform, anytime [2]int) {
	nmin := MinLines(target, delta)
	var need [2]int
	for i, q := range powerChances {
		need[i] = int(math.Ceil(q * float64(runs)))
	}
	passes := boundPasses{}
	rs := make([]planRun, runs)
	for i := range rs {
		rs[i] = planRun{r: rand.New(rand.NewPCG(uint64(i), 2028)), w: newWalker(target, delta, false, 1)}
	}
	reported := 0 // streams in which anytime has reported
	var buf []obsLine
	for e := 1; e <= powerHorizon && (uniform[1] == 0 || anytime[1] == 0); e++ {
		reporting := 0 // streams in which one look at exactly e entries reports
		for i := range rs {
			p := &rs[i]
			buf = g.entryLines(p.r, 1, buf)
			c := int(math.Round(buf[0].confidence * gridSteps))
			p.n[c]++
			if buf[0].agree {
				p.k[c]++
			}
			if !p.reported {
				p.w.observe(buf, Draw{}, false)
				if p.reported = p.w.hasThreshold(); p.reported {
					reported++
				}
			}
			if lookReports(&p.n, &p.k, target, delta, nmin, passes) {
				reporting++
			}
		}
		for i := range need {
			if uniform[i] == 0 && reporting >= need[i] {
				uniform[i] = e
			}
			if anytime[i] == 0 && reported >= need[i] {
				anytime[i] = e
			}
		}
	}
	return uniform, anytime
}

// lookReports is the uniform walk's verdict over lines counted by grid
// point: its first tested candidate, the highest with nmin lines at or
// above it, passes (as firstCandidatePasses, walking the grid from the
// top).
func lookReports(n, k *[gridSteps + 1]int, target, delta float64, nmin int, passes boundPasses) bool {
	nt, kt := 0, 0
	for c := gridSteps; c >= 0; c-- {
		if nt, kt = nt+n[c], kt+k[c]; nt >= nmin {
			return passes.at(kt, nt, target, delta)
		}
	}
	return false
}

// entriesText writes an entry count, "> horizon" for 0.
func entriesText(n int) string {
	if n == 0 {
		return fmt.Sprintf("> %d", powerHorizon)
	}
	return fmt.Sprint(n)
}

// ratioText writes anytime's entries over the planned look's.
func ratioText(anytime, uniform int) string {
	switch {
	case anytime == 0 && uniform == 0:
		return "–"
	case anytime == 0:
		return "> " + twoDigits(float64(powerHorizon)/float64(uniform))
	case uniform == 0:
		return "< " + twoDigits(float64(anytime)/float64(powerHorizon))
	}
	return twoDigits(float64(anytime) / float64(uniform))
}

// twoDigits writes a ratio to two significant digits.
func twoDigits(x float64) string {
	return strconv.FormatFloat(x, 'g', 2, 64)
}

// planTableHeader is the planned-look table's head, as the page has it.
const planTableHeader = "| curve | target | uniform, one look planned at N entries: N for a threshold with probability 50%, 80% | anytime, looked at after every entry: entries by which it has reported with probability 50%, 80% | anytime / uniform: 50%, 80% |\n|---|---|---|---|---|\n"

// planRowText is one row of the table, of runs streams.
func planRowText(runs int, c curve, target float64) string {
	u, a := planRow(runs, c.grid(), target, simDelta)
	return fmt.Sprintf("| %s | %.2f | %s, %s | %s, %s | %s, %s |", c.name, target,
		entriesText(u[0]), entriesText(u[1]), entriesText(a[0]), entriesText(a[1]), ratioText(a[0], u[0]), ratioText(a[1], u[1]))
}

// planTable is the whole table.
func planTable(runs int, targets []float64, curves []curve) string {
	var b strings.Builder
	b.WriteString(planTableHeader)
	for _, c := range curves {
		for _, target := range targets {
			b.WriteString(planRowText(runs, c, target) + "\n")
		}
	}
	return b.String()
}

// powerRuns is how many streams a row of the power figures has.
const powerRuns = 200

// The page's planned-look table is the simulation's: its head, and its
// rows that take seconds to recompute (every row but the rising curve's
// at 0.95, which runs every stream to the horizon), recomputed with the
// page's 200 runs a row and the same seeds, are exactly the page's.
// TestPowerFigures prints every row.
func TestPowerPlanSimulation(t *testing.T) {
	simulationOnly(t)
	doc, err := os.ReadFile("../../../docs/calibration.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(doc)
	if !strings.Contains(page, planTableHeader) {
		t.Fatalf("docs/calibration.md has no table headed\n%s", planTableHeader)
	}
	start := time.Now()
	for _, row := range []struct {
		c      curve
		target float64
	}{{flatCurve, 0.90}, {flatCurve, 0.95}, {risingCurve, 0.90}, {halfCurve, 0.90}, {halfCurve, 0.95}} {
		if want := planRowText(powerRuns, row.c, row.target); !strings.Contains(page, "\n"+want+"\n") {
			t.Errorf("docs/calibration.md lacks the simulation's row\n%s", want)
		}
	}
	t.Logf("rows recomputed in %v", time.Since(start))
}
