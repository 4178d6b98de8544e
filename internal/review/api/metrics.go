package api

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// labelsTotal is created once per process and registered on the registry
// of every config Caddy loads, so the count goes on across reloads. Its
// labels are bounded: model versions the upstream answered with, three
// types, two agree values.
var labelsTotal = sync.OnceValue(func() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "systemone",
		Name:      "review_labels_total",
		Help:      "Labels stored by reviewers (a replaced label counts again), by model version, question type and whether the label agrees with the model's answer.",
	}, []string{"model", "type", "agree"})
})

// registerLabels registers the counter on reg, or returns the one already
// registered under its name.
func registerLabels(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := labelsTotal()
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing, nil
			}
		}
		return nil, err
	}
	return c, nil
}
