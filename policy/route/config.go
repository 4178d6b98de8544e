package route

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/caddyserver/caddy/v2"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

// Config is the `route` block: confidence thresholds pinned to concrete model
// versions, and the review queue for answers routed to a human or drawn for
// an audit.
type Config struct {
	// Pins holds the thresholds of each pinned model version.
	Pins []Pin `json:"pins,omitempty"`
	// Escalations are the `escalate` blocks: a second opinion, by another
	// version, before an answer goes to a person. Default none.
	Escalations []Escalation `json:"escalations,omitempty"`
	// Unpinned is the route of an answer from a version with no pin: "human"
	// (default) or "auto".
	Unpinned string `json:"unpinned,omitempty"`
	// OrgFallback is the threshold of a question from an org that has no
	// line of its own for the question's type under the pin (see
	// Pin.Orgs): "pooled" (default) takes the pin's type line, the
	// threshold calibrated on every org's labels; "human" routes the
	// question human with reason org_no_threshold, so that only orgs with
	// thresholds of their own are answered automatically.
	OrgFallback string `json:"org_fallback,omitempty"`
	// Queue, when set, appends every response routed to a human to a Redis
	// stream, and those drawn by Audit. It needs the handler's redis.
	Queue *Queue `json:"queue,omitempty"`
	// Audit is the share, in 0..1, of all routed 200 responses (auto or
	// human) that are also queued, drawn uniformly at random and
	// independently of route and confidence, so that labels of the drawn
	// entries are an unbiased sample to calibrate thresholds on. Default 0:
	// no audit. Needs Queue.
	Audit float64 `json:"audit,omitempty"`
	// ActiveAudit, instead of Audit, draws each routed 200 with a
	// probability that depends on its confidence (see ActiveAudit). Default
	// nil: off. Needs Queue; excludes Audit.
	ActiveAudit *ActiveAudit `json:"active_audit,omitempty"`
	// IncludeContent adds the request and response bodies to each queue
	// entry. Default false: entries then hold ids, routes, confidences and
	// the model's answers only, and the stream keeps no evaluated content.
	// Needs Queue.
	IncludeContent bool `json:"include_content,omitempty"`
	// MaxContent bounds the bytes of content one entry stores with
	// IncludeContent, request and response together: the request is stored
	// when it fits, then the response when it fits in what is left. A body
	// that does not fit is not stored (a cut JSON body could neither be
	// replayed nor read for its options), and the entry names it in
	// `content_too_large`. Default DefaultMaxContent (512 KiB); at least
	// 1 KiB, with no upper bound: max_body and the 8 MiB of an answer the
	// gateway reads bound what an entry can hold. Needs IncludeContent.
	MaxContent int64 `json:"max_content,omitempty"`
	// OnAlarm is what a guarantee alarm of the review handler's `monitor`
	// does here: "alert" (default) leaves routing to the thresholds (the
	// alarm is a log entry, metrics and an alert), "human" routes the
	// questions of every (model, type) group in alarm human with reason
	// guarantee_alarm until the group is reset. human needs Queue (and so
	// the handler's redis): the gateway reads the alarm set the review handler
	// keeps for the queue's stream under the same key_prefix, every
	// DefaultAlarmRefresh (2s), never on the request path.
	OnAlarm string `json:"on_alarm,omitempty"`
	// Certificates, when set, is the file `calibrate --certificates` wrote:
	// every `cert <id>` of the pins and escalate blocks must be in it, for
	// the line's model (and first version), type, question or org, and
	// threshold (exactly, or as calibrate writes it: rounded up to 4
	// decimals). An escalate line's certificate computed under another
	// threshold of the first version than its pin holds is logged as a
	// warning when the router is made (StageMismatches), not refused. It
	// is read when the config is validated and again when it is
	// provisioned: a regular file of at most 16 MiB with at least one
	// certificate. Default none: ids are only checked for their form.
	Certificates string `json:"certificates,omitempty"`
}

// DefaultMaxContent is what Config.MaxContent defaults to: 512 KiB, about
// twice the largest text the evaluation service accepts (64k tokens of
// about 4 bytes), so that a request it answered is stored whole, while a
// body padded far beyond that (up to max_body) is not.
const DefaultMaxContent = 512 << 10

// minMaxContent is the smallest max_content: below it not even a small
// request fits, and the setting is surely a typo (512 for 512KiB).
const minMaxContent = 1 << 10

// ActiveAudit is the `audit active` mode: labels are spent where a
// threshold can be decided. A routed 200 whose highest question confidence
// is at or above From is drawn with probability MaxShare, any other with
// probability Floor, never zero, so that every answer keeps a known chance
// of being labelled and `calibrate --method weighted` can weigh each drawn
// answer by 1/p (importance weighting; Zrnic and Candès, "Active
// statistical inference", ICML 2024). The probability follows the
// entry's highest confidence, not its lowest, because the calibration's
// groups are (model, type) and its candidate thresholds are question
// confidences: every answer at or above a candidate t >= From is then in
// an entry drawn with MaxShare, so the drawn answers at or above t are a
// uniform sample of the traffic at or above t, and the exact binomial
// bound applies there unweighted.
type ActiveAudit struct {
	// MaxShare is the probability, in (0, 1], of an answer at or above From,
	// and so the most any answer is drawn with: the expected share of
	// traffic drawn is at most MaxShare whatever the confidences are.
	MaxShare float64 `json:"max_share"`
	// Floor is the probability, in (0, MaxShare], of every other answer.
	// Default MaxShare / 10.
	Floor float64 `json:"floor,omitempty"`
	// From is the confidence, in 0..1, from which answers are drawn with
	// MaxShare: set it below the lowest threshold the version may get (for
	// example its previous pin's minus a margin). Default 0.5.
	From *float64 `json:"from,omitempty"`
}

// Defaults of ActiveAudit.
const (
	// DefaultActiveFloorRatio is Floor's default as a share of MaxShare.
	DefaultActiveFloorRatio = 0.1
	// DefaultActiveFrom is From's default.
	DefaultActiveFrom = 0.5
)

// floor returns Floor or its default.
func (a ActiveAudit) floor() float64 {
	if a.Floor == 0 {
		return a.MaxShare * DefaultActiveFloorRatio
	}
	return a.Floor
}

// from returns From or its default.
func (a ActiveAudit) from() float64 {
	if a.From == nil {
		return DefaultActiveFrom
	}
	return *a.From
}

func (a ActiveAudit) validate() error {
	if !(a.MaxShare > 0 && a.MaxShare <= 1) {
		return fmt.Errorf("audit active: share %v is not in (0, 1]", a.MaxShare)
	}
	if f := a.floor(); !(f > 0 && f <= a.MaxShare) {
		return fmt.Errorf("audit active: floor %v is not in (0, %v] (the share)", f, a.MaxShare)
	}
	if !inUnit(a.from()) {
		return fmt.Errorf("audit active: from %v is outside 0..1", a.from())
	}
	return nil
}

// Pin is the thresholds tuned against one concrete model version.
type Pin struct {
	// Version is the concrete version, as the response's `model` names it
	// (for example "service-1.0.0").
	Version string `json:"version"`
	// Noul, Choice and Score are the thresholds for each question type, in
	// 0..1. A type without one routes its questions to a human (no_threshold).
	Noul   *float64 `json:"noul,omitempty"`
	Choice *float64 `json:"choice,omitempty"`
	Score  *float64 `json:"score,omitempty"`
	// NoulCert, ChoiceCert and ScoreCert are the ids of the certificates
	// (`calibrate --certificates`) of the type thresholds: 16 lowercase hex
	// digits each, named in X-Route-Certificate for every question routed
	// auto under that threshold. Each needs its threshold. Default none.
	NoulCert   string `json:"noul_cert,omitempty"`
	ChoiceCert string `json:"choice_cert,omitempty"`
	ScoreCert  string `json:"score_cert,omitempty"`
	// Questions overrides the type's threshold for a question id, for
	// every org.
	Questions map[string]float64 `json:"questions,omitempty"`
	// QuestionCerts holds the certificate id of a Questions threshold, by
	// question id. Default none.
	QuestionCerts map[string]string `json:"question_certs,omitempty"`
	// Orgs holds organizations' own thresholds (`calibrate --by org`), at
	// most one entry per org. A question from an org takes its question
	// line, else the org's line for its type, else the pin's type line
	// (Config.OrgFallback "pooled") or human with reason org_no_threshold
	// (OrgFallback "human"). Default none.
	Orgs []OrgPin `json:"orgs,omitempty"`
}

// OrgPin is one organization's thresholds under a pin: the Caddyfile's
// `org <name> { <type> <threshold> [cert <id>] | <type> human }`.
type OrgPin struct {
	// Org is the organization id, as the identity step names it (the
	// org_keys file's value, the org_header's, or the key's own org).
	Org string `json:"org"`
	// Lines are the org's lines, at most one per question type.
	Lines []OrgLine `json:"lines,omitempty"`
}

// OrgLine is an org's rule for one question type: a threshold (with, as
// any threshold, an optional certificate id), or Human.
type OrgLine struct {
	// Type is the question type: noul, choice or score.
	Type string `json:"type"`
	// Threshold is the org's own threshold for the type, in 0..1.
	Threshold *float64 `json:"threshold,omitempty"`
	// Human routes the org's questions of the type human, reason
	// no_threshold: its own labels do not reach the target, and its
	// answers must not take the pooled threshold instead. Excludes
	// Threshold.
	Human bool `json:"human,omitempty"`
	// Cert is the id of the threshold's certificate (16 lowercase hex
	// digits); needs Threshold. Default none.
	Cert string `json:"cert,omitempty"`
}

// Values of Config.OrgFallback, the default first.
const (
	OrgFallbackPooled = "pooled"
	OrgFallbackHuman  = "human"
)

// Queue is the Redis stream that receives human-routed answers.
type Queue struct {
	// Stream is the Redis stream key.
	Stream string `json:"stream"`
	// MaxLen trims the stream approximately (XADD MAXLEN ~). Default 100000.
	MaxLen int64 `json:"maxlen,omitempty"`
}

// DefaultMaxLen is the stream length Queue.MaxLen defaults to.
const DefaultMaxLen = 100000

// Validate checks the config without acquiring anything: thresholds and
// audit in 0..1, each version pinned at most once, known `unpinned`,
// `org_fallback` and `on_alarm` values, a named stream, a queue for audit,
// include_content and on_alarm human, max_content, and, with a
// certificates file, every certificate id against it. A Caddyfile reports
// its errors as they are, after the block's name.
func (c Config) Validate() error {
	if c.Unpinned != "" && !slices.Contains(unpinnedRoutes, c.Unpinned) {
		return fmt.Errorf("unpinned must be %q or %q, not %q", RouteHuman, RouteAuto, c.Unpinned)
	}
	if c.OrgFallback != "" && c.OrgFallback != OrgFallbackPooled && c.OrgFallback != OrgFallbackHuman {
		return fmt.Errorf("org_fallback must be %q or %q, not %q", OrgFallbackPooled, OrgFallbackHuman, c.OrgFallback)
	}
	seen := make(map[string]bool, len(c.Pins))
	for _, p := range c.Pins {
		if p.Version == "" {
			return errors.New("pin: empty version")
		}
		if seen[p.Version] {
			return fmt.Errorf("pin %q: version pinned twice", p.Version)
		}
		seen[p.Version] = true
		if err := p.Validate(); err != nil {
			return err
		}
	}
	if err := c.validateEscalations(); err != nil {
		return err
	}
	if q := c.Queue; q != nil {
		if q.Stream == "" {
			return errors.New("queue: empty stream name")
		}
		if q.MaxLen < 0 {
			return fmt.Errorf("queue %q: negative maxlen %d", q.Stream, q.MaxLen)
		}
	}
	if !inUnit(c.Audit) {
		return fmt.Errorf("audit %v is outside 0..1", c.Audit)
	}
	if c.OnAlarm != "" && !slices.Contains(onAlarmValues, c.OnAlarm) {
		return fmt.Errorf("on_alarm must be %q or %q, not %q", OnAlarmAlert, OnAlarmHuman, c.OnAlarm)
	}
	if a := c.ActiveAudit; a != nil {
		if err := a.validate(); err != nil {
			return err
		}
		if c.Audit > 0 {
			return errors.New("audit and active_audit exclude each other: the draw is uniform or it is not")
		}
	}
	if c.Queue == nil {
		if c.OnAlarm == OnAlarmHuman {
			return errors.New("on_alarm human needs a queue: the review handler keeps the alarms of the queue's stream")
		}
		// Both would silently do nothing: say so at load time instead.
		if c.Audit > 0 || c.ActiveAudit != nil {
			return errors.New("audit needs a queue to write the drawn entries to")
		}
		if c.IncludeContent {
			return errors.New("include_content needs a queue")
		}
	}
	if err := c.checkCertificates(); err != nil {
		return err
	}
	if c.MaxContent != 0 {
		if c.MaxContent < minMaxContent {
			return fmt.Errorf("max_content %d bytes: must be at least 1KiB (%d bytes)", c.MaxContent, minMaxContent)
		}
		if !c.IncludeContent {
			return errors.New("max_content needs include_content: without it no content is stored")
		}
	}
	return nil
}

// Validate checks the pin on its own (Config.Validate runs it for each
// pin, and checks the pins against each other): thresholds in 0..1,
// certificate ids of 16 lowercase hex digits beside a threshold, and org
// blocks with a name each, once, of known types each given once.
func (p Pin) Validate() error {
	if err := p.validateLines(); err != nil {
		return fmt.Errorf("pin %q: %w", p.Version, err)
	}
	return nil
}

func (p Pin) validateLines() error {
	for _, t := range p.typeThresholds() {
		if err := checkLine(t.typ, t.v, t.cert); err != nil {
			return err
		}
	}
	// Sorted, so that a config with several faults always names the same.
	for _, id := range slices.Sorted(maps.Keys(p.Questions)) {
		v := p.Questions[id]
		if err := checkLine(fmt.Sprintf("question %q", id), &v, p.QuestionCerts[id]); err != nil {
			return err
		}
	}
	for _, id := range slices.Sorted(maps.Keys(p.QuestionCerts)) {
		if _, ok := p.Questions[id]; !ok {
			return fmt.Errorf("question %q cert %q without a threshold", id, p.QuestionCerts[id])
		}
	}
	orgs := make(map[string]bool, len(p.Orgs))
	for _, o := range p.Orgs {
		if o.Org == "" {
			return errors.New("org with an empty name")
		}
		if orgs[o.Org] {
			return fmt.Errorf("org %q given twice", o.Org)
		}
		orgs[o.Org] = true
		if err := o.validate(); err != nil {
			return fmt.Errorf("org %q: %w", o.Org, err)
		}
	}
	return nil
}

// validate checks an org's lines: known types, each once, each a threshold
// in 0..1 or human, a certificate id only beside a threshold.
func (o OrgPin) validate() error {
	if len(o.Lines) == 0 {
		// Likely a block left out: it would change nothing, silently.
		return errors.New("no lines: give a type a threshold or human, or leave the org out")
	}
	var types []string
	for _, l := range o.Lines {
		if !slices.Contains(questionTypes, l.Type) {
			return fmt.Errorf("unknown question type %q: want one of %v", l.Type, questionTypes)
		}
		if slices.Contains(types, l.Type) {
			return fmt.Errorf("%s given twice", l.Type)
		}
		types = append(types, l.Type)
		switch {
		case l.Human && l.Threshold != nil:
			return fmt.Errorf("%s is a threshold or human, not both", l.Type)
		case l.Human && l.Cert != "":
			return fmt.Errorf("%s human takes no cert: nothing routes auto under it", l.Type)
		case !l.Human && l.Threshold == nil:
			return fmt.Errorf("%s needs a threshold or human", l.Type)
		}
		if err := checkLine(l.Type, l.Threshold, l.Cert); err != nil {
			return err
		}
	}
	return nil
}

// checkLine checks one threshold line, named what: the threshold, when
// there is one, in 0..1, and the certificate id, when there is one, well
// formed and beside a threshold.
func checkLine(what string, threshold *float64, cert string) error {
	if threshold != nil && !inUnit(*threshold) {
		return fmt.Errorf("%s threshold %v is outside 0..1", what, *threshold)
	}
	if threshold != nil && math.Signbit(*threshold) {
		// -0 equals 0, but no calibration writes it: a typo for some
		// other number, most likely.
		return fmt.Errorf("%s threshold -0 is negative: a threshold is in 0..1", what)
	}
	if cert == "" {
		return nil
	}
	if threshold == nil {
		return fmt.Errorf("%s cert %q without a threshold", what, cert)
	}
	// One spelling, the one calibrate writes: ids are compared as
	// strings (by verify, by an auditor matching a header to the
	// certificates file).
	if !certificate.ValidID(cert) {
		return fmt.Errorf("%s cert %q: a certificate id is %d lowercase hex digits", what, cert, certificate.IDLen)
	}
	return nil
}

// replaced returns c with placeholders such as {env.NAME} resolved in its
// names: pinned versions, question ids, org names and the stream.
func (c Config) replaced(repl *caddy.Replacer) Config {
	pins := make([]Pin, len(c.Pins))
	for i, p := range c.Pins {
		pins[i] = replacedPin(p, repl)
	}
	c.Pins = pins
	c.Certificates = repl.ReplaceAll(c.Certificates, "")
	c.Escalations = replacedEscalations(c.Escalations, repl)
	if c.Queue != nil {
		q := *c.Queue
		q.Stream = repl.ReplaceAll(q.Stream, "")
		c.Queue = &q
	}
	return c
}

// replacedPin returns p with placeholders resolved in its version,
// question ids and org names.
func replacedPin(p Pin, repl *caddy.Replacer) Pin {
	p.Version = repl.ReplaceAll(p.Version, "")
	if len(p.Questions) > 0 {
		questions := make(map[string]float64, len(p.Questions))
		for id, t := range p.Questions {
			questions[repl.ReplaceAll(id, "")] = t
		}
		p.Questions = questions
	}
	if len(p.QuestionCerts) > 0 {
		certs := make(map[string]string, len(p.QuestionCerts))
		for id, cert := range p.QuestionCerts {
			certs[repl.ReplaceAll(id, "")] = cert
		}
		p.QuestionCerts = certs
	}
	if len(p.Orgs) > 0 {
		orgs := make([]OrgPin, len(p.Orgs))
		for j, o := range p.Orgs {
			o.Org = repl.ReplaceAll(o.Org, "")
			orgs[j] = o
		}
		p.Orgs = orgs
	}
	return p
}

// questionTypes are the question types a threshold line can name.
var questionTypes = []string{evaluation.TypeNoul, evaluation.TypeChoice, evaluation.TypeScore}

// typeThreshold is a pin's threshold for one question type, and its
// certificate id; v is nil when the pin has none.
type typeThreshold struct {
	typ  string
	v    *float64
	cert string
}

func (p Pin) typeThresholds() [3]typeThreshold {
	return [3]typeThreshold{
		{evaluation.TypeNoul, p.Noul, p.NoulCert},
		{evaluation.TypeChoice, p.Choice, p.ChoiceCert},
		{evaluation.TypeScore, p.Score, p.ScoreCert},
	}
}

// inUnit reports whether v is in 0..1; NaN is not.
func inUnit(v float64) bool { return v >= 0 && v <= 1 }
