package simulator

import (
	"math"
	"math/rand/v2"
	"sort"
)

// Distributions are kept in whole hundredths summing to exactly 100: that is
// the service's "rounded to two decimals, then renormalized so the sum is exactly
// 1", with no floating-point error left to show in JSON.

// apportion splits total into whole parts proportional to weights by the
// largest-remainder method; ties go to the lower index. Weights that sum to
// zero split evenly.
func apportion(weights []float64, total int) []int {
	n := len(weights)
	parts := make([]int, n)
	if n == 0 {
		return parts
	}
	var sum float64
	for _, w := range weights {
		sum += w
	}
	exact := make([]float64, n)
	for i, w := range weights {
		if sum > 0 {
			exact[i] = float64(total) * w / sum
		} else {
			exact[i] = float64(total) / float64(n)
		}
	}
	left := total
	for i, x := range exact {
		parts[i] = int(math.Floor(x))
		left -= parts[i]
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		fa, fb := exact[order[a]]-float64(parts[order[a]]), exact[order[b]]-float64(parts[order[b]])
		return fa > fb
	})
	for i := 0; left > 0; i = (i + 1) % n {
		parts[order[i]]++
		left--
	}
	return parts
}

// naturalDistribution draws a distribution over n outcomes: its sharpness is
// drawn too, so answers range from unsure to certain.
func naturalDistribution(rng *rand.Rand, n int) []int {
	sharpness := 6 * rng.Float64()
	weights := make([]float64, n)
	for i := range weights {
		weights[i] = math.Exp(sharpness * rng.NormFloat64())
	}
	return apportion(weights, 100)
}

// naturalNoul draws a yes-probability in hundredths, most often near 0 or 1.
func naturalNoul(rng *rand.Rand) int {
	z := 3 * rng.NormFloat64()
	return int(math.Round(100 / (1 + math.Exp(-z))))
}

// distributionWithPeak draws a distribution over n outcomes whose largest
// part is peak, at a drawn position. peak must be at least ceil(100/n), so
// the rest fits under it.
func distributionWithPeak(rng *rand.Rand, n, peak int) []int {
	at := rng.IntN(n)
	weights := make([]float64, n-1)
	for i := range weights {
		weights[i] = rng.Float64()
	}
	rest := apportion(weights, 100-peak)
	// Move what exceeds the peak to parts that have room; there is room
	// because (n-1)*peak >= 100-peak.
	excess := 0
	for i, p := range rest {
		if p > peak {
			excess += p - peak
			rest[i] = peak
		}
	}
	for i := 0; excess > 0; i = (i + 1) % len(rest) {
		if rest[i] < peak {
			rest[i]++
			excess--
		}
	}
	dist := make([]int, 0, n)
	dist = append(dist, rest[:at]...)
	dist = append(dist, peak)
	return append(dist, rest[at:]...)
}

// minPeak is the smallest largest part of a distribution over n outcomes.
func minPeak(n int) int {
	return (100 + n - 1) / n
}

// peakForChoice returns the peak whose choice confidence is nearest c, which
// must be within 0..1. Confidence grows linearly with the peak, so rounding
// the exact solution gives the nearest.
func peakForChoice(n int, c float64) int {
	if n == 1 {
		return 100
	}
	exact := (c*float64(n-1)*100 + 100) / float64(n)
	return min(max(int(math.Round(exact)), minPeak(n)), 100)
}

// peakForScore returns the peak whose score confidence (the peak itself) is
// nearest c, which must be within 0..1.
func peakForScore(n int, c float64) int {
	return min(max(int(math.Round(c*100)), minPeak(n)), 100)
}

// argmax returns the first index of the largest part.
func argmax(dist []int) int {
	best := 0
	for i, p := range dist {
		if p > dist[best] {
			best = i
		}
	}
	return best
}

// choiceConfidence is the service's (n*peak - 1) / (n - 1); 1 for one option.
func choiceConfidence(dist []int) float64 {
	n := len(dist)
	if n == 1 {
		return 1
	}
	peak := dist[argmax(dist)]
	return float64(n*peak-100) / float64(100*(n-1))
}

// scoreOf is the probability-weighted tier number, in hundredths.
func scoreOf(dist []int) int {
	s := 0
	for tier, p := range dist {
		s += tier * p
	}
	return s
}
