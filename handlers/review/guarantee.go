package review

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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/policy/guarantee"
)

// Monitor is the `monitor` setting: the guarantee watched live. Per (model,
// question type) group, every first label of a question whose entry was
// drawn by audit and whose question was routed auto is one observation of
// the group's e-process (package guarantee) for "this group's agreement is
// at or above Target"; the group's alarm is raised when its evidence
// reaches 1/Alpha and stays until DELETE /guarantee/<model>/<type>.
type Monitor struct {
	// Target is the agreement the thresholds were calibrated for, in (0, 1).
	// Required.
	Target float64 `json:"target"`
	// Alpha bounds the chance that a group whose agreement is at or above
	// Target ever alarms, in (0, 1). Default 0.05.
	Alpha float64 `json:"alpha,omitempty"`
}

// params returns m's process settings, alpha defaulted.
func (m *Monitor) params() guarantee.Params {
	p := guarantee.Params{Target: m.Target, Alpha: m.Alpha}
	if p.Alpha == 0 {
		p.Alpha = guarantee.DefaultAlpha
	}
	return p
}

// metricsRefresh is how often each review handler re-reads every group's
// state for its metrics, so that every instance's gauges follow labels
// stored through another instance; a variable so that tests can shrink it.
var metricsRefresh = 10 * time.Second

// maxMetricModel bounds the model label of the guarantee gauges, as the
// gateway's metrics do.
const maxMetricModel = 128

// guaranteeGauges are created once per process and registered on the
// registry of every config, like labelsTotal. Their series are bounded by
// the groups the review stream holds: model versions the upstream
// answered with, times three types.
var guaranteeGauges = sync.OnceValue(func() [2]*prometheus.GaugeVec {
	return [2]*prometheus.GaugeVec{
		prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "systemone",
			Name:      "guarantee_alarm",
			Help:      "1 while the (model, type) group's guarantee monitor is in alarm (its auto answers agree with reviewers less than the target, at level alpha), until the group is reset; else 0.",
		}, []string{"model", "type"}),
		prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "systemone",
			Name:      "guarantee_evidence",
			Help:      "The (model, type) group's e-process: evidence against \"agreement at or above the target\"; the alarm is raised at 1/alpha.",
		}, []string{"model", "type"}),
	}
})

// registerGauges registers the guarantee gauges on reg, or returns the ones
// already registered under their names.
func registerGauges(reg prometheus.Registerer) (alarm, evidence *prometheus.GaugeVec, err error) {
	out := guaranteeGauges()
	for i, g := range out {
		if err := reg.Register(g); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, nil, err
			}
			existing, ok := are.ExistingCollector.(*prometheus.GaugeVec)
			if !ok {
				return nil, nil, err
			}
			out[i] = existing
		}
	}
	return out[0], out[1], nil
}

// guaranteeMonitor is a Handler's running monitor.
type guaranteeMonitor struct {
	params          guarantee.Params
	alarm, evidence *prometheus.GaugeVec
	stop            context.CancelFunc
	done            chan struct{}
}

// startMonitor registers the gauges and starts the metrics refresh.
func (h *Handler) startMonitor(reg prometheus.Registerer) error {
	params := h.Monitor.params()
	if err := params.Validate(); err != nil {
		return err
	}
	alarm, evidence, err := registerGauges(reg)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	m := &guaranteeMonitor{params: params, alarm: alarm, evidence: evidence, stop: stop, done: make(chan struct{})}
	h.monitor = m
	go func() {
		defer close(m.done)
		t := time.NewTicker(metricsRefresh)
		defer t.Stop()
		for {
			if states, err := h.store.groups(ctx); err == nil {
				for g, s := range states {
					m.set(g, s.At(params))
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// close stops the metrics refresh and waits for it.
func (m *guaranteeMonitor) close() {
	m.stop()
	<-m.done
}

// set shows a group's state in the gauges.
func (m *guaranteeMonitor) set(g guarantee.Group, s guarantee.State) {
	model := g.Model
	if len(model) > maxMetricModel {
		model = strings.ToValidUTF8(model[:maxMetricModel], "")
	}
	alarm := 0.0
	if s.Alarm {
		alarm = 1
	}
	m.alarm.WithLabelValues(model, g.Type).Set(alarm)
	m.evidence.WithLabelValues(model, g.Type).Set(s.Evidence)
}

// observed shows the groups a label write observed, and logs each alarm it
// raised: one warn entry per alarm, by the instance whose write raised it.
func (h *Handler) observed(updates []groupUpdate) {
	m := h.monitor
	for _, u := range updates {
		m.set(u.group, u.state)
		if !u.raised {
			continue
		}
		if ce := h.logger.Check(zap.WarnLevel, "guarantee alarm"); ce != nil {
			ce.Write(zap.String("model", u.group.Model), zap.String("type", u.group.Type),
				zap.Int64("labels", u.state.Labels), zap.Int64("agree", u.state.Agree),
				zap.Float64("evidence", u.state.Evidence), zap.Float64("target", m.params.Target),
				zap.Float64("alpha", m.params.Alpha), zap.String("stream", h.store.stream))
		}
	}
}

// guaranteeGroup is one group of GET /guarantee.
type guaranteeGroup struct {
	Model    string  `json:"model"`
	Type     string  `json:"type"`
	Labels   int64   `json:"labels"`
	Agree    int64   `json:"agree"`
	Evidence float64 `json:"evidence"`
	Alarm    bool    `json:"alarm"`
}

// serveGuarantee answers GET /guarantee and DELETE /guarantee/<model>/<type>
// (404 not_found for both without a monitor).
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
	g, ok := groupPath(r.URL)
	if !ok {
		writeDetail(w, http.StatusNotFound, "not_found")
		return
	}
	if !allow(w, r, http.MethodDelete) {
		return
	}
	found, err := h.store.resetGroup(r.Context(), g, h.monitor.params)
	if err != nil {
		h.storeFailed(w, "guarantee", err)
		return
	}
	if !found {
		writeDetail(w, http.StatusNotFound, "not_found")
		return
	}
	h.monitor.set(g, guarantee.Fresh(h.monitor.params.Target))
	if ce := h.logger.Check(zap.InfoLevel, "guarantee reset"); ce != nil {
		ce.Write(zap.String("model", g.Model), zap.String("type", g.Type), zap.String("stream", h.store.stream))
	}
	w.WriteHeader(http.StatusNoContent)
}

// groupPath reads /guarantee/<model>/<type> from the escaped path, so that
// a model holding a slash is written %2F; the type is the last segment.
func groupPath(u *url.URL) (guarantee.Group, bool) {
	rest, ok := strings.CutPrefix(u.EscapedPath(), "/guarantee/")
	if !ok {
		return guarantee.Group{}, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 || i == len(rest)-1 {
		return guarantee.Group{}, false
	}
	model, err1 := url.PathUnescape(rest[:i])
	typ, err2 := url.PathUnescape(rest[i+1:])
	if err1 != nil || err2 != nil || !utf8.ValidString(model) || strings.Contains(typ, ":") {
		return guarantee.Group{}, false
	}
	return guarantee.Group{Model: model, Type: typ}, true
}

func (h *Handler) listGuarantee(w http.ResponseWriter, r *http.Request) {
	states, err := h.store.groups(r.Context())
	if err != nil {
		h.storeFailed(w, "guarantee", err)
		return
	}
	p := h.monitor.params
	groups := make([]guaranteeGroup, 0, len(states))
	for g, s := range states {
		s = s.At(p)
		h.monitor.set(g, s)
		groups = append(groups, guaranteeGroup{Model: g.Model, Type: g.Type, Labels: s.Labels, Agree: s.Agree, Evidence: s.Evidence, Alarm: s.Alarm})
	}
	slices.SortFunc(groups, func(a, b guaranteeGroup) int {
		if c := strings.Compare(a.Model, b.Model); c != 0 {
			return c
		}
		return strings.Compare(a.Type, b.Type)
	})
	writeJSON(w, http.StatusOK, map[string]any{"target": p.Target, "alpha": p.Alpha, "groups": groups})
}

// groups reads every group's stored state; a state that does not read is
// left out (it was not written by this version).
func (s *store) groups(ctx context.Context) (map[guarantee.Group]guarantee.State, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	all, err := s.client.HGetAll(ctx, s.stateKey).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[guarantee.Group]guarantee.State, len(all))
	for m, v := range all {
		g, ok := guarantee.ParseMember(m)
		st, err := guarantee.Decode(v)
		if ok && err == nil {
			out[g] = st
		}
	}
	return out, nil
}

// resetScript starts a group's process afresh and clears its alarm, when
// the group has a state: KEYS state hash, alarm set; ARGV member, target.
var resetScript = redis.NewScript(guarantee.LuaUpdate + `
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], guarantee_fresh(tonumber(ARGV[2])))
redis.call('SREM', KEYS[2], ARGV[1])
return 1
`)

// resetGroup starts g's sequence afresh (labels 0, evidence 1, no alarm);
// found is false for a group never observed.
func (s *store) resetGroup(ctx context.Context, g guarantee.Group, p guarantee.Params) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	n, err := resetScript.Run(ctx, s.client, []string{s.stateKey, s.alarmKey}, g.Member(), guarantee.LuaArgs(p)[0]).Int()
	return n == 1, err
}
