package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/review/monitor"
)

// DefaultSettle is how long after an entry's first label the monitor
// takes its observation when `settle` is not set.
const DefaultSettle = 10 * time.Minute

// Monitor is the `monitor` setting: the guarantee watched live. Each entry
// drawn by audit with labelled questions routed auto is one observation
// of each (model, question type) group among them (with ByOrg, each
// (model, type, org) group): the share of its labelled auto questions of
// the group that agree, taken Settle after the entry's first label with
// the labels current then, in entry order. A group's e-process (package
// guarantee) tests "this group's agreement is at or above Target"; its
// alarm is raised when the evidence reaches the current sequence's
// 1/level (Alpha/2^k for the k-th sequence) and stays until DELETE
// /guarantee/<model>/<type>.
type Monitor struct {
	// Target is the agreement the thresholds were calibrated for, in (0, 1).
	// Required.
	Target float64 `json:"target"`
	// Alpha bounds the chance that a group whose agreement is at or above
	// Target ever alarms, over its whole life and all its resets, in (0,
	// 1). Default 0.05.
	Alpha float64 `json:"alpha,omitempty"`
	// ByOrg keeps a group per (model, type, org) instead of per (model,
	// type). Default off.
	ByOrg bool `json:"by_org,omitempty"`
	// Settle is how long after an entry's first label its observation is
	// taken, so that a correction within it replaces the first label and
	// entries labelled within it are taken in entry order; 0 takes it at
	// once. Default 10m.
	Settle *caddy.Duration `json:"settle,omitempty"`
}

// params returns m's process settings, alpha defaulted.
func (m *Monitor) params() monitor.Params {
	p := monitor.Params{Target: m.Target, Alpha: m.Alpha}
	if p.Alpha == 0 {
		p.Alpha = monitor.DefaultAlpha
	}
	return p
}

// settle returns Settle, defaulted.
func (m *Monitor) settle() time.Duration {
	if m.Settle == nil {
		return DefaultSettle
	}
	return time.Duration(*m.Settle)
}

// Refresh periods of a running monitor (guaranteeMonitor's takeEvery and
// metricsRefresh).
const (
	// defaultMetricsRefresh is how often each review handler re-reads
	// every group's state for its metrics, so that every instance's gauges
	// follow observations another instance took.
	defaultMetricsRefresh = 10 * time.Second
	// defaultTakeEvery is how often each review handler takes the
	// observations that have settled. Every instance does, and the take
	// script hands each entry to exactly one of them.
	defaultTakeEvery = time.Second
)

// maxMetricModel bounds the model and org labels of the guarantee gauges,
// as the gateway's metrics do.
const maxMetricModel = 128

// guaranteeMetrics is the process's collector of the guarantee gauges,
// registered on the registry of every config, like labelsTotal. It holds
// the last value of each group; under `by org` its series carry an `org`
// label too (all of them, so that the metric family keeps one set of label
// names when a process runs both kinds of monitor), and once an escalated
// group exists, an `escalated_from` label (the first version; "" for a
// version's own answers), for the same reason. Its series are bounded by
// the groups the review stream holds.
type guaranteeMetrics struct {
	mu     sync.Mutex
	groups map[monitor.Group][2]float64 // alarm 0|1, evidence
}

// Help of the guarantee gauges.
const (
	alarmHelp    = "1 while the group's guarantee monitor is in alarm (its auto answers agree with reviewers less than the target, at level alpha), until the group is reset; else 0."
	evidenceHelp = "The group's e-process: evidence against \"agreement at or above the target\"; the alarm is raised at 1/alpha of the group's current sequence."
)

// processMetrics is the one collector of the process's handlers: one
// series per group, whichever config or instance observed it last.
var processMetrics = newGuaranteeMetrics()

func newGuaranteeMetrics() *guaranteeMetrics {
	return &guaranteeMetrics{groups: map[monitor.Group][2]float64{}}
}

// Describe sends nothing: the collector is unchecked, since its label
// names depend on the monitors running.
func (*guaranteeMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect writes every group's gauges.
func (c *guaranteeMetrics) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	byOrg, escalated := false, false
	for g := range c.groups {
		byOrg = byOrg || g.ByOrg
		escalated = escalated || g.EscalatedFrom != ""
	}
	for g, v := range c.groups {
		names := []string{"model", "type"}
		values := []string{bounded(g.Model), g.Type}
		if byOrg {
			names, values = append(names, "org"), append(values, bounded(g.Org))
		}
		if escalated {
			names, values = append(names, "escalated_from"), append(values, bounded(g.EscalatedFrom))
		}
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("systemone_guarantee_alarm", alarmHelp, names, nil),
			prometheus.GaugeValue, v[0], values...)
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("systemone_guarantee_evidence", evidenceHelp, names, nil),
			prometheus.GaugeValue, v[1], values...)
	}
}

func bounded(v string) string {
	if len(v) > maxMetricModel {
		return strings.ToValidUTF8(v[:maxMetricModel], "")
	}
	return v
}

func (c *guaranteeMetrics) set(g monitor.Group, s monitor.State) {
	alarm := 0.0
	if s.Alarm {
		alarm = 1
	}
	c.mu.Lock()
	c.groups[g] = [2]float64{alarm, s.Evidence}
	c.mu.Unlock()
}

// registerMetrics registers the guarantee collector c on reg.
func registerMetrics(reg prometheus.Registerer, c *guaranteeMetrics) error {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return err
		}
	}
	return nil
}

// guaranteeMonitor is a Handler's running monitor.
type guaranteeMonitor struct {
	params monitor.Params
	byOrg  bool
	settle time.Duration
	// now is the monitor's clock: when a label was given, when an entry
	// settles. Every instance's clock should agree within the settle time.
	now func() time.Time
	// metrics is the collector the monitor's gauges go to: processMetrics
	// when the handler runs it; a test's own.
	metrics *guaranteeMetrics
	// takeEvery and metricsRefresh are the periods of the takes and of the
	// gauges' refresh (defaultTakeEvery, defaultMetricsRefresh).
	takeEvery, metricsRefresh time.Duration
	stop                      context.CancelFunc
	done                      chan struct{}
}

// startMonitor registers the gauges and starts the takes and the metrics
// refresh.
func (h *Handler) startMonitor(reg prometheus.Registerer) error {
	params := h.Monitor.params()
	if err := params.Validate(); err != nil {
		return err
	}
	// Each entry weighed against max_questions: every answer the same.
	params.MaxQuestions = h.maxQuestions()
	if h.Monitor.settle() < 0 {
		return errors.New("settle must not be negative")
	}
	if err := registerMetrics(reg, processMetrics); err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	m := &guaranteeMonitor{params: params, byOrg: h.Monitor.ByOrg, settle: h.Monitor.settle(), now: h.clock(),
		metrics: processMetrics, takeEvery: defaultTakeEvery, metricsRefresh: defaultMetricsRefresh,
		stop: stop, done: make(chan struct{})}
	h.monitor = m
	go func() {
		defer close(m.done)
		take := time.NewTicker(m.takeEvery)
		defer take.Stop()
		refresh := time.NewTicker(m.metricsRefresh)
		defer refresh.Stop()
		h.refreshMetrics(ctx)
		for {
			select {
			case <-ctx.Done():
				return
			case <-take.C:
				h.takeSettled(ctx)
			case <-refresh.C:
				h.refreshMetrics(ctx)
			}
		}
	}()
	return nil
}

// refreshMetrics shows every stored group in the gauges.
func (h *Handler) refreshMetrics(ctx context.Context) {
	if states, err := h.store.monitor.Groups(ctx, h.monitor.params); err == nil {
		for g, s := range states {
			h.monitor.metrics.set(g, s)
		}
	}
}

// takeSettled takes the observations that have settled and shows them.
// A failure is logged by the next request that meets it (a take is
// retried every take period; nothing is lost while Redis is away).
func (h *Handler) takeSettled(ctx context.Context) {
	updates, err := h.store.take(ctx, h.monitor.now(), h.monitor.params, h.correctWithin())
	h.observed(updates)
	if err != nil && ctx.Err() == nil {
		if ce := h.logger.Check(zap.DebugLevel, "guarantee take failed"); ce != nil {
			ce.Write(zap.String("stream", h.store.stream), zap.Error(err))
		}
	}
}

// close stops the takes and the metrics refresh and waits for them.
func (m *guaranteeMonitor) close() {
	m.stop()
	<-m.done
}

// observed shows the groups an observation updated, and logs each alarm it
// raised: one warn entry per alarm, by the instance whose take raised it.
func (h *Handler) observed(updates []monitor.Observed) {
	m := h.monitor
	for _, u := range updates {
		h.monitor.metrics.set(u.Group, u.State)
		if !u.Raised {
			continue
		}
		if ce := h.logger.Check(zap.WarnLevel, "guarantee alarm"); ce != nil {
			fields := []zap.Field{zap.String("model", u.Group.Model), zap.String("type", u.Group.Type)}
			if u.Group.ByOrg {
				fields = append(fields, zap.String("org", u.Group.Org))
			}
			if u.Group.EscalatedFrom != "" {
				fields = append(fields, zap.String("escalated_from", u.Group.EscalatedFrom))
			}
			ce.Write(append(fields, zap.Int64("entries", u.State.Entries),
				zap.Int64("labels", u.State.Labels), zap.Int64("agree", u.State.Agree),
				zap.Float64("evidence", u.State.Evidence), zap.Float64("target", m.params.Target),
				zap.Float64("alpha", m.params.Level(u.State.Sequence)), zap.String("stream", h.store.stream))...)
		}
	}
}

// guaranteeGroup is one group of GET /guarantee.
type guaranteeGroup struct {
	Model    string  `json:"model"`
	Type     string  `json:"type"`
	Org      string  `json:"org"`
	Alpha    float64 `json:"alpha"`
	Entries  int64   `json:"entries"`
	Labels   int64   `json:"labels"`
	Agree    int64   `json:"agree"`
	Evidence float64 `json:"evidence"`
	Alarm    bool    `json:"alarm"`
	// RaisedAt is when the alarm was raised and ResetAt the group's last
	// reset (RFC 3339, Redis's clock: the clock of the entry ids, so that
	// `calibrate --since <raised_at>` keeps the entries queued after the
	// alarm); null when not in alarm (or its time was lost with Redis's
	// data) and when never reset.
	RaisedAt *string `json:"raised_at"`
	ResetAt  *string `json:"reset_at"`
	// Escalated is true for an escalated group: the second answers, by
	// Model, of the questions an `escalate` block asked again of the
	// first version EscalatedFrom ("" for a version's own answers).
	Escalated     bool   `json:"escalated"`
	EscalatedFrom string `json:"escalated_from"`
	// LateCorrections counts the group's labels corrected after their
	// entry was taken as evidence (late.go); a correction to a
	// disagreement also moved the evidence (late_monitor.go).
	LateCorrections int `json:"late_corrections"`
	// Refused counts the group's entries with more of its questions than
	// max_questions: refused as evidence.
	Refused int64 `json:"refused"`
}

// serveGuarantee answers GET /guarantee and DELETE
// /guarantee/<model>/<type>[?org=<org>] (404 not_found for both without a
// monitor).
func (h *Handler) serveGuarantee(w http.ResponseWriter, r *http.Request) {
	if h.monitor == nil {
		writeDetail(w, http.StatusNotFound, "not_found")
		return
	}
	if r.URL.Path == "/guarantee" {
		if allow(w, r, http.MethodGet) {
			h.listGuarantee(w, r)
		}
		return
	}
	g, ok := groupPath(r.URL, h.monitor.byOrg)
	if !ok {
		writeDetail(w, http.StatusNotFound, "not_found")
		return
	}
	if !allow(w, r, http.MethodDelete) {
		return
	}
	state, found, err := h.store.monitor.Reset(r.Context(), g, h.monitor.params)
	if err != nil {
		h.storeFailed(w, "guarantee", err)
		return
	}
	if !found {
		writeDetail(w, http.StatusNotFound, "not_found")
		return
	}
	h.monitor.metrics.set(g, state)
	if ce := h.logger.Check(zap.InfoLevel, "guarantee reset"); ce != nil {
		ce.Write(zap.String("model", g.Model), zap.String("type", g.Type), zap.String("org", g.Org), zap.String("escalated_from", g.EscalatedFrom),
			zap.Float64("alpha", h.monitor.params.Level(state.Sequence)), zap.String("by", authUser(r)),
			zap.String("stream", h.store.stream))
	}
	w.WriteHeader(http.StatusNoContent)
}

// groupPath reads /guarantee/<model>/<type> from the escaped path, so that
// a model holding a slash is written %2F; the type is the last segment.
// Under `by org` the group is the org's of the `org` query parameter
// (absent or empty: the group of requests without an org); without it, an
// `org` parameter names no group. The `escalated_from` parameter names
// the escalated group of the model's second answers to the questions of
// that first version (absent or empty: the model's own answers).
func groupPath(u *url.URL, byOrg bool) (monitor.Group, bool) {
	rest, ok := strings.CutPrefix(u.EscapedPath(), "/guarantee/")
	if !ok {
		return monitor.Group{}, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 || i == len(rest)-1 {
		return monitor.Group{}, false
	}
	model, err1 := url.PathUnescape(rest[:i])
	typ, err2 := url.PathUnescape(rest[i+1:])
	if err1 != nil || err2 != nil || !utf8.ValidString(model) || strings.ContainsAny(typ, ":@^") {
		return monitor.Group{}, false
	}
	org := u.Query().Get("org")
	if !byOrg && org != "" {
		return monitor.Group{}, false
	}
	return monitor.Group{Model: model, Type: typ, Org: org, ByOrg: byOrg, EscalatedFrom: u.Query().Get("escalated_from")}, true
}

func (h *Handler) listGuarantee(w http.ResponseWriter, r *http.Request) {
	p := h.monitor.params
	states, err := h.store.monitor.List(r.Context(), p)
	if err != nil {
		h.storeFailed(w, "guarantee", err)
		return
	}
	late, err := h.store.lateCounts(r.Context())
	if err != nil {
		h.storeFailed(w, "guarantee", err)
		return
	}
	refused, err := h.store.monitor.Refused(r.Context())
	if err != nil {
		h.storeFailed(w, "guarantee", err)
		return
	}
	for g := range refused {
		if _, ok := states[g]; !ok && g.ByOrg == h.monitor.byOrg {
			states[g] = monitor.Listed{State: monitor.Fresh(p.Target)} // every entry of it refused so far
		}
	}
	groups := make([]guaranteeGroup, 0, len(states))
	for g, s := range states {
		h.monitor.metrics.set(g, s.State)
		groups = append(groups, guaranteeGroup{Model: g.Model, Type: g.Type, Org: g.Org, Alpha: p.Level(s.Sequence),
			Entries: s.Entries, Labels: s.Labels, Agree: s.Agree, Evidence: s.Evidence, Alarm: s.Alarm,
			RaisedAt: rfc3339(s.RaisedAt), ResetAt: rfc3339(s.ResetAt),
			Escalated: g.EscalatedFrom != "", EscalatedFrom: g.EscalatedFrom,
			LateCorrections: lateFor(late, lateGroup{g.Model, g.Type, g.Org, g.EscalatedFrom}), Refused: refused[g]})
	}
	slices.SortFunc(groups, func(a, b guaranteeGroup) int {
		if c := strings.Compare(a.Model, b.Model); c != 0 {
			return c
		}
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		if c := strings.Compare(a.EscalatedFrom, b.EscalatedFrom); c != 0 {
			return c
		}
		return strings.Compare(a.Org, b.Org)
	})
	writeJSON(w, http.StatusOK, map[string]any{"target": p.Target, "alpha": p.Alpha, "groups": groups})
}

// rfc3339 writes t as RFC 3339 in UTC to the millisecond; nil for the
// zero time (JSON null).
func rfc3339(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	v := t.UTC().Format(time.RFC3339Nano)
	return &v
}
