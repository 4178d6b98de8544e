package breaker

import (
	"cmp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
)

// stateDesc describes systemone_breaker_state{model}.
var stateDesc = prometheus.NewDesc("systemone_breaker_state",
	"Circuit breaker state per model that has a breaker (a model gets one when a request for it fails): 0 closed, 1 half-open, 2 open.",
	[]string{"model"}, nil)

var gaugeValue = map[gobreaker.State]float64{
	gobreaker.StateClosed:   0,
	gobreaker.StateHalfOpen: 1,
	gobreaker.StateOpen:     2,
}

// stateCollector reads the breakers at scrape time, so the series are
// exactly the breakers the tables hold: a model without a breaker has none,
// and a dropped model's series goes with it.
type stateCollector struct{}

// StateCollector returns the collector of systemone_breaker_state{model}:
// one series per model with a breaker in any live Set, at most MaxModels per
// breaker setting. Register it on every config's registry; registering it
// twice on one registry gives prometheus.AlreadyRegisteredError.
func StateCollector() prometheus.Collector { return stateCollector{} }

func (stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- stateDesc }

func (stateCollector) Collect(ch chan<- prometheus.Metric) {
	var live []*table
	tables.Range(func(_, v any) bool {
		live = append(live, v.(*table))
		return true
	})
	// During a reload that changes the settings, two tables may hold one
	// model: the newest reports it.
	slices.SortFunc(live, func(a, b *table) int { return cmp.Compare(b.seq, a.seq) })
	seen := make(map[string]bool)
	for _, t := range live {
		t.mu.RLock()
		breakers := make([]*breaker, 0, len(t.models))
		for _, b := range t.models {
			breakers = append(breakers, b)
		}
		t.mu.RUnlock()
		for _, b := range breakers {
			if seen[b.model] {
				continue
			}
			seen[b.model] = true
			ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, gaugeValue[b.cb.State()], b.model)
		}
	}
}
