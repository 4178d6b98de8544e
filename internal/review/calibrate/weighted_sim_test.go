package calibrate

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
)

// Simulations of the active audit: traffic from a known population, each
// answer drawn with the active audit's probability for its confidence,
// and `--method weighted` on the drawn lines. Shared by the guarantee
// tests (weighted_guarantee_test.go) and the efficiency benchmark
// (weighted_bench_test.go).

// curve is a known population on the service's two-decimal grid: weight
// is the share of traffic at each confidence (unnormalized), agree the
// chance of agreement there.
type curve struct {
	name   string
	weight func(c float64) float64
	agree  func(c float64) float64
}

// The curves of the simulations.
var (
	// logisticCurve is TestGuaranteeLogistic's: confidences uniform,
	// agreement logistic in confidence.
	logisticCurve = curve{"logistic", func(float64) float64 { return 1 }, logistic(-2, 8)}
	// highCurve has most traffic at high confidence (weight c^5: 73% of
	// answers at 0.8 or above), agreement a steep logistic.
	highCurve = curve{"high", func(c float64) float64 { return math.Pow(c, 5) }, logistic(-8, 13)}
	// lateCurve has confidences uniform and agreement flat at 0.6 up to
	// about 0.55, rising steeply around 0.7 to 0.99: a judge whose
	// confidence means little below a point.
	lateCurve = curve{"late", func(float64) float64 { return 1 }, func(c float64) float64 { return 0.6 + 0.39/(1+math.Exp(-25*(c-0.7))) }}
)

// grid is a curve tabulated: the confidences, their cumulative weights for
// drawing, and the truth at each threshold.
type grid struct {
	curve
	conf, cum, chance []float64 // chance: agree at each confidence
	design            design    // the design cum is tilted by; zero for the traffic
}

func (c curve) grid() grid {
	g := grid{curve: c}
	total := 0.0
	for i := 0; i <= 100; i++ {
		x := float64(i) / 100
		total += c.weight(x)
		g.conf = append(g.conf, x)
		g.cum = append(g.cum, total)
		g.chance = append(g.chance, c.agree(x))
	}
	for i := range g.cum {
		g.cum[i] /= total
	}
	return g
}

// draw returns an answer from the traffic's distribution: its confidence
// and whether it agrees.
func (g grid) draw(r *rand.Rand) (float64, bool) {
	i, _ := slices.BinarySearch(g.cum, r.Float64())
	i = min(i, len(g.conf)-1)
	return g.conf[i], r.Float64() < g.chance[i]
}

// truth returns the true agreement of the traffic's answers at or above t
// and their share of it.
func (g grid) truth(t float64) (agreement, coverage float64) {
	sw, sa, total := 0.0, 0.0, 0.0
	for _, c := range g.conf {
		w := g.weight(c)
		total += w
		if c >= t {
			sw += w
			sa += w * g.agree(c)
		}
	}
	if sw == 0 {
		return 1, 0
	}
	return sa / sw, sw / total
}

// best is the lowest threshold whose true agreement reaches target, and
// its coverage: what a method that knew the population would pick.
func (g grid) best(target float64) (threshold, coverage float64) {
	threshold = 1.01
	for i := len(g.conf) - 1; i >= 0; i-- {
		if a, _ := g.truth(g.conf[i]); a >= target {
			threshold = g.conf[i]
		}
	}
	_, coverage = g.truth(threshold)
	return threshold, coverage
}

// design is an active audit: share at or above from, floor below.
type design struct {
	share, floor, from float64
}

func (d design) p(c float64) float64 {
	if c >= d.from {
		return d.share
	}
	return d.floor
}

// line is one drawn answer as `/labels` shows it under the design.
func (d design) line(c float64, agree bool) Line {
	return Line{Model: "m", Type: "noul", Question: "q", Confidence: c, HasConfidence: true, Agree: agree, Audit: true,
		Draw: Draw{P: d.p(c), HasP: true, Active: true, Floor: d.floor, From: d.from}}
}

// tilted is the distribution of the answers the design draws: the
// traffic's weighted by the probability of a draw.
func (g grid) tilted(d design) grid {
	t := g
	t.cum = make([]float64, len(g.cum))
	prev, total := 0.0, 0.0
	for i, c := range g.conf {
		total += (g.cum[i] - prev) * d.p(c)
		prev = g.cum[i]
		t.cum[i] = total
	}
	for i := range t.cum {
		t.cum[i] /= total
	}
	t.design = d
	return t
}

// drawnShare is the expected share of traffic the design draws.
func (g grid) drawnShare(d design) float64 {
	prev, total := 0.0, 0.0
	for i, c := range g.conf {
		total += (g.cum[i] - prev) * d.p(c)
		prev = g.cum[i]
	}
	return total
}

// traffic runs the design over the traffic until it has drawn n answers,
// and returns their lines, in the order drawn. Answers are independent,
// so the drawn ones are independent draws from the tilted distribution;
// the answers not drawn leave no line, and the stop depends on the count
// only, never on a label.
func (g grid) traffic(r *rand.Rand, d design, n int, into []Line) []Line {
	into = into[:0]
	tilted := g
	if g.design != d {
		tilted = g.tilted(d)
	}
	for range n {
		c, agree := tilted.draw(r)
		into = append(into, d.line(c, agree))
	}
	return into
}

// calibrateOne calibrates one group's lines and returns its outcome.
func calibrateOne(lines []Line, target, delta float64, method string) Group {
	res, err := Calibrate(lines, Options{Target: target, Delta: delta, By: ByType, MinLabels: 1, Method: method})
	if err != nil || len(res.Groups) != 1 {
		panic("calibrate failed in the simulation: " + strconv.Quote(errString(err)))
	}
	return res.Groups[0]
}

func errString(err error) string {
	if err == nil {
		return "no single group"
	}
	return err.Error()
}
