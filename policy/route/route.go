// Package route decides, from an evaluation service's 200 response, whether
// its answers may be used automatically or must go to a human: each answer's
// confidence against the threshold pinned to the model version that answered.
// It also writes the X-Route* headers and feeds a Redis review queue.
package route

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/review/alarms"
	"github.com/systemone/systemone-gateway/internal/review/record"
)

// Routes of a question and of a response.
const (
	RouteAuto  = record.RouteAuto
	RouteHuman = record.RouteHuman
)

// unpinnedRoutes lists the values of Config.Unpinned, the default first.
var unpinnedRoutes = []string{RouteHuman, RouteAuto}

// Reasons of a Decision. When several causes force a human, the reported one
// is the first of: ReasonUnreadableResponse, ReasonUnpinnedVersion,
// ReasonGuardrailsUnavailable, ReasonGuardrailsReview, ReasonGuaranteeUnknown,
// ReasonGuaranteeAlarm, ReasonOrgNoThreshold, ReasonNoThreshold,
// ReasonLowConfidence. That is, the causes that say
// nothing about the answers themselves come first, because they make the
// confidences moot; an alarm comes before the thresholds, since it says
// they no longer hold; an org without a line of its own comes before a
// missing threshold, since it is the configuration's gap, mended by
// calibrating that org (`calibrate --by org`).
const (
	// ReasonConfident: every question is at or above its threshold.
	ReasonConfident = "confident"
	// ReasonLowConfidence: a question is below its threshold.
	ReasonLowConfidence = "low_confidence"
	// ReasonNoThreshold: the pin has no threshold for a question, or the
	// org's line for its type is `human`.
	ReasonNoThreshold = "no_threshold"
	// ReasonOrgNoThreshold: with `org_fallback human`, the org has no line
	// of its own for a question's type (and the pin no question line for
	// it).
	ReasonOrgNoThreshold = "org_no_threshold"
	// ReasonUnpinnedVersion: no pin names the version that answered. The
	// route is human, or auto with `unpinned auto`.
	ReasonUnpinnedVersion = "unpinned_version"
	// ReasonGuardrailsReview: the guardrails verdict asked for a review.
	ReasonGuardrailsReview = "guardrails_review"
	// ReasonGuardrailsUnavailable: the guardrails check failed and the request
	// went through unchecked.
	ReasonGuardrailsUnavailable = "guardrails_unavailable"
	// ReasonGuaranteeAlarm: with `on_alarm human`, the (model, type) group
	// of a question is in guarantee alarm (its auto answers were found to
	// agree with reviewers less than the target), even with `unpinned auto`.
	ReasonGuaranteeAlarm = "guarantee_alarm"
	// ReasonGuaranteeUnknown: with `on_alarm human`, this instance has not
	// been able to read the alarms since it started (Redis away), or not
	// for alarms.WriteBack after its first successful read, so any group may
	// be in alarm: every question routes human.
	ReasonGuaranteeUnknown = "guarantee_unknown"
	// ReasonUnreadableResponse: the body is not a complete answer set for the
	// request's questions (not JSON, over the buffering bound, an answer
	// missing or of the wrong type, a confidence outside 0..1, no model).
	ReasonUnreadableResponse = "unreadable_response"
)

// Router routes responses. It is safe for concurrent use.
type Router struct {
	pins         map[string]*pin
	unpinnedAuto bool
	// orgFallbackHuman: an org without a line for a type routes its
	// questions human (org_fallback human) instead of taking the pin's.
	orgFallbackHuman bool
	queue            *queue // nil without a configured queue
	audit            float64
	alarms           alarms.Reader // nil unless on_alarm human
	alarmProblem     func() string // the watch's Problem, for readiness
	stopAlarms       func()
	escalations      map[string]escalation // by first version
	active           *activeDraw           // nil unless `audit active`

	// rng draws the audit sample. A source per Router, not the global
	// one, so a test can seed it; math/rand/v2 sources are not safe for
	// concurrent use, hence the lock.
	rngMu sync.Mutex
	rng   *rand.Rand
}

// pin is a Pin ready for lookups.
type pin struct {
	version   string
	types     map[string]line               // question type -> its line
	questions map[string]line               // question id -> its line
	orgs      map[string]map[string]orgLine // org -> question type -> the org's line
}

// line is a threshold line: the threshold and the id of its certificate
// ("" when the line carries none).
type line struct {
	threshold float64
	cert      string
}

// orgLine is an org's line for a type: a threshold line, or human.
type orgLine struct {
	line
	human bool
}

// StreamWriter is the part of a go-redis client the review queue uses: it
// writes each batch of entries as pipelined XADDs. The handler's
// *redis.Client or *redis.ClusterClient is one.
type StreamWriter interface {
	Pipeline() redis.Pipeliner
}

// Store is the part of a go-redis client a Router uses: the queue's writes
// and the guarantee alarm watch's reads.
type Store interface {
	StreamWriter
	alarms.Client
}

// New resolves placeholders in cfg's names (versions, question ids, the
// stream), validates it and returns its Router. client is the handler's Redis
// client: required when cfg.Queue is set or OnAlarm is human, ignored
// otherwise; the caller keeps owning it. prefix is the handler's key_prefix,
// under which the review handler keeps the alarm set of the queue's stream
// (internal/review/monitor.AlarmKey). A nil logger discards the queue's and the watch's
// logs. The audit draw is seeded at random. Close stops what New starts.
// opts change the defaults of what New starts (see Option).
func New(cfg Config, client Store, prefix string, logger *zap.Logger, opts ...Option) (*Router, error) {
	o := options{alarmRefresh: DefaultAlarmRefresh, queueCapacity: queueCapacity, now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	cfg = cfg.replaced(caddy.NewReplacer())
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	r := &Router{
		pins:             make(map[string]*pin, len(cfg.Pins)),
		unpinnedAuto:     cfg.Unpinned == RouteAuto,
		orgFallbackHuman: cfg.OrgFallback == OrgFallbackHuman,
		audit:            cfg.Audit,
		active:           newActiveDraw(cfg.ActiveAudit),
		rng:              rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		escalations:      newEscalations(cfg.Escalations),
	}
	for _, p := range cfg.Pins {
		r.pins[p.Version] = newPin(p)
	}
	if q := cfg.Queue; q != nil {
		if client == nil {
			return nil, fmt.Errorf("queue %q needs the systemone block's redis", q.Stream)
		}
		r.queue = newQueue(*q, cfg.IncludeContent, cfg.MaxContent, client, o.queueCapacity, logger)
	}
	// on_alarm human has a queue (Validate), and so the client checked
	// above: the review handler keeps the alarms of the queue's stream.
	if cfg.OnAlarm == OnAlarmHuman {
		w := alarms.Start(client, prefix, cfg.Queue.Stream, o.alarmRefresh, o.now, logger)
		r.alarms, r.alarmProblem, r.stopAlarms = w, w.Problem, w.Close
	}
	return r, nil
}

// Option sets what New starts beyond its Config: periods and sizes of the
// Router's background work, and where it reports.
type Option func(*options)

type options struct {
	alarmRefresh  time.Duration
	queueCapacity int
	now           func() time.Time // the alarm watch's clock
}

// withClock sets the clock of the alarm watch (default time.Now), for
// tests that move it.
func withClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// WithAlarmRefresh sets how often the alarm watch of `on_alarm human`
// reads the alarm set (default DefaultAlarmRefresh, 2s); d > 0.
func WithAlarmRefresh(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.alarmRefresh = d
		}
	}
}

// WithQueueCapacity sets how many review entries may wait for the queue's
// writer before the next is dropped (default 64); n > 0.
func WithQueueCapacity(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.queueCapacity = n
		}
	}
}

// Signal is what earlier steps of the request force on the route.
type Signal struct {
	// GuardrailsReview: the guardrails verdict is in `review`.
	GuardrailsReview bool
	// GuardrailsUnchecked: the guardrails check failed or timed out and the
	// request was let through (`on_error allow`).
	GuardrailsUnchecked bool
	// Org is the organization the identity step found for the request:
	// its lines of a pin's `org` block apply, and with a monitor `by org`
	// its own groups in alarm route its questions human. "" has no lines
	// of its own.
	Org string
}

// Decision is the route of one response.
type Decision struct {
	// Route is RouteAuto or RouteHuman.
	Route string
	// Reason is one of the Reason constants.
	Reason string
	// Model is the concrete version from the response's `model`; "" when the
	// body could not be read that far.
	Model string
	// MinConfidence is the lowest confidence over the questions; meaningful
	// only when HasMinConfidence, that is when every answer was read.
	MinConfidence    float64
	HasMinConfidence bool
	// Questions holds one entry per question, in the request's order.
	Questions []QuestionRoute
	// org is the request's org, whose groups an escalation's alarms are
	// read for.
	org string
}

// QuestionRoute is the route of one question.
type QuestionRoute struct {
	// ID and Type are the question's, from the request.
	ID   string
	Type string
	// Route is RouteAuto when the answer's confidence is at or above the
	// threshold (or the version is unpinned with `unpinned auto`), else
	// RouteHuman.
	Route string
	// Escalated is the question's second answer, by an escalate block's
	// second version; nil when it was not asked again (or its second
	// answer was unreadable).
	Escalated *Escalated
	// Confidence is the answer's confidence (`confidence`, or |2p-1| for
	// noul); meaningful only when HasConfidence, that is when the answer
	// was read.
	Confidence    float64
	HasConfidence bool
	// Threshold applies to this question; meaningful only when HasThreshold.
	Threshold    float64
	HasThreshold bool
	// Reason is why the question routes as it does: ReasonConfident,
	// ReasonEscalated (its second answer, by an escalate block's second
	// version, reached that block's threshold), or ReasonUnpinnedVersion
	// under `unpinned auto`, when it is auto; when
	// human, the first that applies to it of ReasonUnreadableResponse (its
	// answer, or the response's model, unread), ReasonUnpinnedVersion,
	// ReasonGuaranteeUnknown, ReasonGuaranteeAlarm, ReasonOrgNoThreshold,
	// ReasonNoThreshold and ReasonLowConfidence. The causes that concern
	// the request, not its answers (the guardrails verdict), are the
	// Decision's only.
	Reason string
	// Certificate is the id of the certificate the threshold's line
	// carries (`cert <id>`); "" when none. X-Route-Certificate names it
	// when the question routes auto.
	Certificate string
	// The model's answer, meaningful only when HasAnswer, which implies
	// HasConfidence: Answer is the noul probability of yes or the score
	// (probability-weighted tier number), Choice the option key a choice
	// answer picked.
	Answer    float64
	Choice    string
	HasAnswer bool
}

// Decide routes a 200 response. questions are the request's, in its order;
// resp is the body as evaluation.ParseResponse read it, or nil when the body
// could not be read (read error, undecodable encoding, over the buffering
// bound, not JSON), which routes human with ReasonUnreadableResponse. Decide
// never fails and keeps no reference to resp.
func (r *Router) Decide(questions []evaluation.Question, resp *evaluation.Response, signal Signal) Decision {
	d := Decision{Questions: make([]QuestionRoute, len(questions)), org: signal.Org}
	for i, q := range questions {
		d.Questions[i] = QuestionRoute{ID: q.ID, Type: q.Type, Route: RouteHuman}
	}
	readable := resp != nil && resp.Model != ""
	if resp != nil {
		d.Model = resp.Model
		readAnswers(resp.Answers, d.Questions)
		for _, q := range d.Questions {
			readable = readable && q.HasConfidence
		}
	}

	p := r.pins[d.Model]
	var noThreshold, orgNoThreshold, low bool
	for i := range d.Questions {
		q := &d.Questions[i]
		var missing string
		if p != nil {
			var l line
			l, q.HasThreshold, missing = p.threshold(signal.Org, q.ID, q.Type, r.orgFallbackHuman)
			q.Threshold, q.Certificate = l.threshold, l.cert
			noThreshold = noThreshold || missing == ReasonNoThreshold
			orgNoThreshold = orgNoThreshold || missing == ReasonOrgNoThreshold
			q.Reason = missing
		}
		switch {
		case !q.HasConfidence || d.Model == "":
			q.Reason = ReasonUnreadableResponse
		case p == nil:
			q.Reason = ReasonUnpinnedVersion
			if r.unpinnedAuto {
				q.Route = RouteAuto
			}
		case q.HasThreshold && q.Confidence >= q.Threshold:
			q.Route, q.Reason = RouteAuto, ReasonConfident
		case q.HasThreshold:
			q.Reason = ReasonLowConfidence
			low = true
		}
	}
	alarmed, unknown := false, false
	switch {
	case r.alarms != nil && !r.alarms.Known():
		// Fail safe: the alarms could not be read since start.
		for i := range d.Questions {
			d.Questions[i].routeForAlarm(ReasonGuaranteeUnknown)
		}
		unknown = true
	case r.alarms != nil && d.Model != "":
		for i := range d.Questions {
			q := &d.Questions[i]
			if r.alarms.Alarmed(d.Model, q.Type, signal.Org, "") {
				q.routeForAlarm(ReasonGuaranteeAlarm)
				alarmed = true
			}
		}
	}
	if readable && len(d.Questions) > 0 {
		d.MinConfidence, d.HasMinConfidence = d.Questions[0].Confidence, true
		for _, q := range d.Questions[1:] {
			d.MinConfidence = min(d.MinConfidence, q.Confidence)
		}
	}

	d.Route = RouteHuman
	switch {
	case !readable:
		d.Reason = ReasonUnreadableResponse
	case p == nil && !r.unpinnedAuto:
		d.Reason = ReasonUnpinnedVersion
	case signal.GuardrailsUnchecked:
		d.Reason = ReasonGuardrailsUnavailable
	case signal.GuardrailsReview:
		d.Reason = ReasonGuardrailsReview
	case unknown:
		d.Reason = ReasonGuaranteeUnknown
	case alarmed:
		d.Reason = ReasonGuaranteeAlarm
	case p == nil:
		d.Route, d.Reason = RouteAuto, ReasonUnpinnedVersion
	case orgNoThreshold:
		d.Reason = ReasonOrgNoThreshold
	case noThreshold:
		d.Reason = ReasonNoThreshold
	case low:
		d.Reason = ReasonLowConfidence
	default:
		d.Route, d.Reason = RouteAuto, ReasonConfident
	}
	return d
}

// routeForAlarm routes q human for an alarm (reason: ReasonGuaranteeAlarm
// or ReasonGuaranteeUnknown), which outranks every reason of a question
// but an unread answer and an unpinned version, as in a Decision's.
func (q *QuestionRoute) routeForAlarm(reason string) {
	if q.Route == RouteHuman && (q.Reason == ReasonUnreadableResponse || q.Reason == ReasonUnpinnedVersion) {
		return
	}
	q.Route, q.Reason = RouteHuman, reason
}

// newPin makes p, a validated Pin, ready for lookups.
func newPin(p Pin) *pin {
	rp := &pin{version: p.Version, types: make(map[string]line, 3)}
	for _, t := range p.typeThresholds() {
		if t.v != nil {
			rp.types[t.typ] = line{threshold: *t.v, cert: t.cert}
		}
	}
	if len(p.Questions) > 0 {
		rp.questions = make(map[string]line, len(p.Questions))
		for id, v := range p.Questions {
			rp.questions[id] = line{threshold: v, cert: p.QuestionCerts[id]}
		}
	}
	if len(p.Orgs) > 0 {
		rp.orgs = make(map[string]map[string]orgLine, len(p.Orgs))
		for _, o := range p.Orgs {
			lines := make(map[string]orgLine, len(o.Lines))
			for _, l := range o.Lines {
				ol := orgLine{human: l.Human}
				if l.Threshold != nil {
					ol.line = line{threshold: *l.Threshold, cert: l.Cert}
				}
				lines[l.Type] = ol
			}
			rp.orgs[o.Org] = lines
		}
	}
	return rp
}

// threshold returns the line that applies to question id, of type typ,
// from org: the question's own line, else the org's line for the type,
// else the pin's type line, or, with fallbackHuman, none. When none
// applies, missing is why: ReasonOrgNoThreshold when the org has no line
// for the type and fallbackHuman, else ReasonNoThreshold (the org's line
// is human, or the pin has no line for the type).
func (p *pin) threshold(org, id, typ string, fallbackHuman bool) (l line, ok bool, missing string) {
	if l, ok := p.questions[id]; ok {
		return l, true, ""
	}
	if ol, ok := p.orgs[org][typ]; ok {
		if ol.human {
			return line{}, false, ReasonNoThreshold
		}
		return ol.line, true, ""
	}
	if fallbackHuman {
		return line{}, false, ReasonOrgNoThreshold
	}
	if l, ok := p.types[typ]; ok {
		return l, true, ""
	}
	return line{}, false, ReasonNoThreshold
}
