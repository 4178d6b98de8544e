package route

import (
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/systemone/systemone-gateway/evaluation"
)

// ReasonEscalated: the question was asked again of an `escalate` block's
// second version, whose answer met the block's threshold for it; the
// client got that answer in place of the first.
const ReasonEscalated = "escalated"

// HeaderEscalated names, for each question answered by the second version
// of an `escalate` block, that version.
const HeaderEscalated = "X-Route-Escalated"

// DefaultEscalationTimeout is what Escalation.Timeout defaults to: 10s.
const DefaultEscalationTimeout = 10 * time.Second

// Escalation is an `escalate <from> to <to> { ... }` block: a 200 answered
// by the concrete version From whose questions include one routed human
// for low confidence or no threshold is asked again, those questions
// only, of To, before it is answered; To's answers that meet To's lines
// here replace From's.
type Escalation struct {
	// From is the first version, as the response's `model` names it. It
	// must be pinned: its pin's thresholds decide which questions are
	// escalated.
	From string `json:"from"`
	// To holds the second version (To.Version, another concrete version)
	// and the thresholds its answers are held to: type lines and question
	// lines, each with an optional `cert <id>`; no org blocks. A question
	// whose type has no line here (and no question line) is not
	// escalated.
	To Pin `json:"to"`
	// Timeout bounds the second call, from its admission to its answer.
	// Default DefaultEscalationTimeout (10s); > 0.
	Timeout caddy.Duration `json:"timeout,omitempty"`
}

// timeout returns Timeout or its default.
func (e Escalation) timeout() time.Duration {
	if e.Timeout == 0 {
		return DefaultEscalationTimeout
	}
	return time.Duration(e.Timeout)
}

// validateEscalations checks the escalate blocks against each other and
// the pins: a named, pinned first version, escalated from at most once, a
// second version other than the first, its lines as a pin's (thresholds in
// 0..1, certificate ids), no org blocks, at least one line, and a positive
// timeout.
func (c Config) validateEscalations() error {
	pinned := make(map[string]bool, len(c.Pins))
	for _, p := range c.Pins {
		pinned[p.Version] = true
	}
	from := make(map[string]bool, len(c.Escalations))
	for _, e := range c.Escalations {
		if err := e.validate(pinned); err != nil {
			return fmt.Errorf("escalate %q to %q: %w", e.From, e.To.Version, err)
		}
		if from[e.From] {
			return fmt.Errorf("escalate %q: escalated from twice; one version has one second opinion", e.From)
		}
		from[e.From] = true
	}
	return nil
}

func (e Escalation) validate(pinned map[string]bool) error {
	switch {
	case e.From == "" || e.To.Version == "":
		return errors.New("empty version")
	case e.From == e.To.Version:
		return errors.New("escalates to the version it escalates from")
	case !pinned[e.From]:
		return fmt.Errorf("needs a pin of %s: its thresholds decide which questions are escalated", e.From)
	case len(e.To.Orgs) > 0:
		return errors.New("takes no org blocks")
	case e.Timeout < 0:
		return fmt.Errorf("timeout %v must be positive", time.Duration(e.Timeout))
	}
	if e.To.Noul == nil && e.To.Choice == nil && e.To.Score == nil && len(e.To.Questions) == 0 {
		return errors.New("has no threshold line: no question would be escalated")
	}
	return e.To.validateLines()
}

// escalation is an Escalation ready for lookups.
type escalation struct {
	to      *pin
	timeout time.Duration
}

// EscalationPlan is what a Decision asks of an escalate block: the second
// version, the questions to ask it (indexes into the Decision's
// Questions, in its order) and the call's time limit.
type EscalationPlan struct {
	From, To  string
	Questions []int
	Timeout   time.Duration
}

// escalable reports whether a question routed for reason may be asked
// again: it is human for its answer's confidence or a missing threshold,
// not for anything the second answer could not change.
func escalable(reason string) bool {
	return reason == ReasonLowConfidence || reason == ReasonNoThreshold
}

// Escalation returns the plan to escalate d, a Decision of Decide, and
// whether there is one: the response's version has an escalate block, the
// decision's reason is about its answers (not an unreadable body, an
// unpinned version, guardrails or unknown alarms), and some question is
// human for low confidence or no threshold and has a line in the block.
func (r *Router) Escalation(d Decision) (EscalationPlan, bool) {
	e, ok := r.escalations[d.Model]
	if !ok {
		return EscalationPlan{}, false
	}
	switch d.Reason {
	case ReasonLowConfidence, ReasonNoThreshold, ReasonOrgNoThreshold, ReasonGuaranteeAlarm:
	default:
		return EscalationPlan{}, false
	}
	plan := EscalationPlan{From: d.Model, To: e.to.version, Timeout: e.timeout}
	for i, q := range d.Questions {
		if q.Route != RouteHuman || !escalable(q.Reason) {
			continue
		}
		if _, ok, _ := e.to.threshold("", q.ID, q.Type, false); ok {
			plan.Questions = append(plan.Questions, i)
		}
	}
	return plan, len(plan.Questions) > 0
}

// Escalated is a question's second answer, by the escalate block's
// second version.
type Escalated struct {
	// Model is the version that answered.
	Model string
	// Route is RouteAuto when the answer met the block's threshold for
	// the question (and its escalated group is not in guarantee alarm):
	// the client got it in place of the first.
	Route string
	// FirstReason is the reason the first answer routed the question
	// human for, which it was asked again for: ReasonLowConfidence or
	// ReasonNoThreshold.
	FirstReason string
	// Confidence, Answer, Choice and HasAnswer are as in QuestionRoute;
	// HasConfidence is true for every Escalated (an unreadable second
	// answer is none).
	Confidence float64
	Answer     float64
	Choice     string
	HasAnswer  bool
}

// ApplyEscalation routes the plan's questions of d by the second
// version's answers in resp: each readable answer at or above the block's
// threshold for its question routes it auto with ReasonEscalated (and the
// block line's certificate), unless, with `on_alarm human`, the escalated
// group of its type (the second version's answers to the first's
// escalated questions, and under a monitor `by org` the org's) is in
// guarantee alarm: then it routes human with ReasonGuaranteeAlarm. The
// others stay human with their first reason. Each question with a
// readable second answer records it in Escalated. d's route, reason and
// lowest confidence are those of the final routes. It returns the indexes
// of the questions routed auto, in d's order.
func (r *Router) ApplyEscalation(d *Decision, plan EscalationPlan, resp *evaluation.Response) []int {
	e := r.escalations[plan.From]
	asked := make([]QuestionRoute, len(plan.Questions))
	for j, i := range plan.Questions {
		asked[j] = QuestionRoute{ID: d.Questions[i].ID, Type: d.Questions[i].Type}
	}
	if resp != nil {
		readAnswers(resp.Answers, asked)
	}
	var answered []int
	alarmed := false
	for j, i := range plan.Questions {
		second := asked[j]
		if !second.HasConfidence {
			continue
		}
		q := &d.Questions[i]
		l, _, _ := e.to.threshold("", q.ID, q.Type, false)
		esc := &Escalated{Model: resp.Model, Route: RouteHuman, FirstReason: q.Reason, Confidence: second.Confidence, Answer: second.Answer, Choice: second.Choice, HasAnswer: second.HasAnswer}
		q.Escalated = esc
		if second.Confidence < l.threshold {
			continue
		}
		if r.alarms != nil && r.alarms.Alarmed(resp.Model, q.Type, d.org, plan.From) {
			// The escalated group's auto answers were found to agree
			// with people less than the target: a person answers.
			q.routeForAlarm(ReasonGuaranteeAlarm)
			alarmed = true
			continue
		}
		esc.Route = RouteAuto
		// The question's own confidence and answer stay the first
		// version's (a review entry labels both); the threshold and
		// certificate are the line it routed auto under.
		q.Route, q.Reason = RouteAuto, ReasonEscalated
		q.Threshold, q.HasThreshold, q.Certificate = l.threshold, true, l.cert
		answered = append(answered, i)
	}
	if len(answered) > 0 || alarmed {
		d.reroute()
	}
	return answered
}

// reroute sets d's route, reason and lowest confidence from its
// questions' final routes, after an escalation turned some auto: auto
// with ReasonEscalated when every question is auto, else human with the
// reason of the human questions that comes first in the order the Reason
// constants state. The lowest confidence is over the answers the client
// gets: the second version's for the questions it answered.
func (d *Decision) reroute() {
	order := []string{ReasonGuaranteeAlarm, ReasonOrgNoThreshold, ReasonNoThreshold, ReasonLowConfidence}
	d.Route, d.Reason = RouteAuto, ReasonEscalated
	best := len(order)
	for i, q := range d.Questions {
		c := q.Confidence
		if q.Reason == ReasonEscalated {
			c = q.Escalated.Confidence
		}
		if i == 0 || c < d.MinConfidence {
			d.MinConfidence = c
		}
		if q.Route != RouteHuman {
			continue
		}
		d.Route = RouteHuman
		for k, reason := range order[:best] {
			if q.Reason == reason {
				best = k
				break
			}
		}
	}
	if d.Route == RouteHuman && best < len(order) {
		d.Reason = order[best]
	}
}

// escalatedHeader returns `<id>=<version>, ...` for the questions
// answered by an escalate block's second version, in the request's order,
// ids percent-encoded as in X-Route-Questions; "" when none.
func (d Decision) escalatedHeader() string {
	var b []byte
	for _, q := range d.Questions {
		if q.Route != RouteAuto || q.Reason != ReasonEscalated || q.Escalated == nil {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = appendEscaped(b, q.ID)
		b = append(b, '=')
		b = appendEscaped(b, q.Escalated.Model)
	}
	return string(b)
}

// newEscalations makes the validated blocks ready for lookups, by first
// version.
func newEscalations(es []Escalation) map[string]escalation {
	out := make(map[string]escalation, len(es))
	for _, e := range es {
		out[e.From] = escalation{to: newPin(e.To), timeout: e.timeout()}
	}
	return out
}

// replacedEscalations resolves placeholders in the blocks' versions and
// question ids, as in the pins'.
func replacedEscalations(es []Escalation, repl *caddy.Replacer) []Escalation {
	if len(es) == 0 {
		return es
	}
	out := make([]Escalation, len(es))
	for i, e := range es {
		e.From = repl.ReplaceAll(e.From, "")
		e.To = replacedPin(e.To, repl)
		out[i] = e
	}
	return out
}
