package guardrails

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/systemone/systemone-gateway/internal/headerset"
)

// Risk Levels as the contract names them.
const (
	RiskNone   = "none"
	RiskLow    = "low"
	RiskMedium = "medium"
	RiskHigh   = "high"
	// RiskUnknown is the risk of a verdict the service did not give.
	RiskUnknown = "unknown"
)

// riskLevels are the risk levels the gateway names, lowest first.
var riskLevels = []string{RiskNone, RiskLow, RiskMedium, RiskHigh}

// serviceLevels maps the service's levels to the contract's. The English
// names are accepted too, in case the service ever answers with them.
var serviceLevels = map[string]string{
	"无风险":    RiskNone,
	"低风险":    RiskLow,
	"中风险":    RiskMedium,
	"高风险":    RiskHigh,
	"none":   RiskNone,
	"low":    RiskLow,
	"medium": RiskMedium,
	"high":   RiskHigh,
}

// CategoryOther is reported for a category the service names but the
// contract does not know (one the service adds later).
const CategoryOther = "other"

// serviceCategories maps the service's categories to the contract's names.
var serviceCategories = map[string]string{
	"敏感政治话题": "political_sensitive",
	"损害国家形象": "national_image",
	"暴力犯罪":   "violent_crime",
	"提示词攻击":  "prompt_attack",
	"一般政治话题": "political_general",
	"伤害未成年人": "minor_harm",
	"违法犯罪":   "illegal_crime",
	"色情":     "pornography",
	"歧视内容":   "discrimination",
	"辱骂":     "abuse",
	"侵犯个人隐私": "privacy",
	"商业违法违规": "commercial_violation",
}

// categoryNames are the category names the gateway reports, in the order
// verdicts report them: from the high-risk ones down, then other. A fixed
// order keeps headers and cached verdicts independent of the order the
// service happens to list them in.
var categoryNames = []string{
	"political_sensitive", "national_image", "violent_crime", "prompt_attack",
	"political_general", "minor_harm", "illegal_crime", "pornography",
	"discrimination", "abuse", "privacy", "commercial_violation",
	CategoryOther,
}

// serviceActions maps the service's suggest_action to English.
var serviceActions = map[string]string{
	"通过": "pass",
	"阻断": "block",
	"代答": "answer_on_behalf",
}

// Actions: the gateway's decision on a request.
const (
	// ActionPass forwards the request.
	ActionPass = "pass"
	// ActionReview forwards the request and routes the answer to a human.
	ActionReview = "review"
	// ActionBlock answers 400 guardrails_blocked (see BlockedBody).
	ActionBlock = "block"
	// ActionUnchecked forwards the request although the check failed
	// (on_error allow), and routes the answer to a human.
	ActionUnchecked = "unchecked"
	// ActionUnavailable answers 503 guardrails_unavailable: the check failed
	// and on_error is block.
	ActionUnavailable = "unavailable"
)

// Verdict is the outcome of one check.
type Verdict struct {
	// Risk is the service's overall_risk_level as a contract level (none,
	// low, medium, high), or RiskUnknown when the check failed. A level the
	// service names but the contract does not know is reported, and
	// decided on, as high: an unknown level must never let content through.
	Risk string
	// Categories are the contract names of the categories the service found,
	// under compliance or security, deduplicated, in a fixed order (the
	// service's table, high-risk first); a category the contract does not know is
	// CategoryOther. Nil when none.
	Categories []string
	// ServiceAction is the service's suggest_action in English: pass, block,
	// answer_on_behalf, or the service's own word lowercased when it is none
	// of these. Empty when the check failed.
	ServiceAction string
	// SuggestAnswer is the service's suggested reply text.
	SuggestAnswer string
	// Action is the gateway's decision: ActionPass, ActionReview,
	// ActionBlock, ActionUnchecked or ActionUnavailable.
	Action string
	// Unavailable reports that the check failed and on_error is block: the
	// request gets 503 guardrails_unavailable. Same as Action ==
	// ActionUnavailable.
	Unavailable bool
	// Err is why the check failed, nil when it did not. It names the kind of
	// failure (timeout, connection, status code, unreadable answer) and never
	// holds request text or a key.
	Err error
	// Elapsed is how long the check took, cache lookup included.
	Elapsed time.Duration
	// Cached reports that the verdict came from the cache, not the service.
	Cached bool
}

// Forward reports whether the request goes upstream (pass, review or
// unchecked).
func (v Verdict) Forward() bool {
	return v.Action == ActionPass || v.Action == ActionReview || v.Action == ActionUnchecked
}

// Header names set by SetHeaders.
const (
	HeaderRisk       = "X-Guardrails-Risk"
	HeaderAction     = "X-Guardrails-Action"
	HeaderCategories = "X-Guardrails-Categories"
)

// SetHeaders writes the X-Guardrails-* headers of a forwarded response into
// h. A header without a value is deleted, so that a same-named header from
// the upstream never passes as the gateway's. For a verdict that is not
// forwarded (block, unavailable) all three are deleted.
func (v Verdict) SetHeaders(h http.Header) {
	var s headerset.Set
	v.AddHeaders(&s)
	s.WriteTo(h)
}

// AddHeaders adds what SetHeaders writes to s, which the handler writes
// with the response's other fields of the gateway at once.
func (v Verdict) AddHeaders(s *headerset.Set) {
	if !v.Forward() {
		s.Del(HeaderRisk)
		s.Del(HeaderAction)
		s.Del(HeaderCategories)
		return
	}
	s.Add(HeaderRisk, v.Risk)
	s.Add(HeaderAction, v.Action)
	if len(v.Categories) == 0 {
		s.Del(HeaderCategories)
		return
	}
	var buf [256]byte
	joined := buf[:0]
	for i, c := range v.Categories {
		if i > 0 {
			joined = append(joined, ',')
		}
		joined = append(joined, c...)
	}
	s.AddBytes(HeaderCategories, joined)
}

// BlockedBody returns the body of the 400 guardrails_blocked answer:
// {"detail":"guardrails_blocked","guardrails":{"risk_level":...,
// "categories":[...],"action":...,"suggest_answer":...}}, where action is
// the service's suggested action.
func (v Verdict) BlockedBody() []byte {
	type details struct {
		RiskLevel     string   `json:"risk_level"`
		Categories    []string `json:"categories"`
		Action        string   `json:"action"`
		SuggestAnswer string   `json:"suggest_answer"`
	}
	body := struct {
		Detail     string  `json:"detail"`
		Guardrails details `json:"guardrails"`
	}{"guardrails_blocked", details{v.Risk, v.Categories, v.ServiceAction, v.SuggestAnswer}}
	if body.Guardrails.Categories == nil {
		body.Guardrails.Categories = []string{}
	}
	b, _ := json.Marshal(body) // strings only: cannot fail
	return b
}

// assessment is what the service said about a message list: the part of a
// verdict that is cached, before the gateway's policy decides on it.
type assessment struct {
	Risk          string   `json:"risk"`
	Categories    []string `json:"categories,omitempty"`
	ServiceAction string   `json:"action,omitempty"`
	SuggestAnswer string   `json:"answer,omitempty"`
}

// serviceAnswer is the body of the service's 200.
type serviceAnswer struct {
	Result struct {
		Compliance serviceFinding `json:"compliance"`
		Security   serviceFinding `json:"security"`
	} `json:"result"`
	OverallRiskLevel *string `json:"overall_risk_level"`
	SuggestAction    string  `json:"suggest_action"`
	SuggestAnswer    string  `json:"suggest_answer"`
}

type serviceFinding struct {
	Categories []string `json:"categories"`
}

// parseAnswer reads the body of the service's 200 into contract terms. An
// answer that is not JSON, or has no overall_risk_level, is an error: the
// check failed.
func parseAnswer(data []byte) (assessment, error) {
	var answer serviceAnswer
	if err := json.Unmarshal(data, &answer); err != nil {
		return assessment{}, fmt.Errorf("guardrails: unreadable answer: %v", err)
	}
	if answer.OverallRiskLevel == nil {
		return assessment{}, errors.New("guardrails: answer has no overall_risk_level")
	}
	return assess(&answer), nil
}

// assess turns the service's answer into contract terms.
func assess(a *serviceAnswer) assessment {
	risk, ok := serviceLevels[strings.TrimSpace(*a.OverallRiskLevel)]
	if !ok {
		risk = RiskHigh
	}
	found := make(map[string]bool)
	for _, c := range slices.Concat(a.Result.Compliance.Categories, a.Result.Security.Categories) {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		name, ok := serviceCategories[c]
		if !ok {
			name = CategoryOther
			if slices.Contains(categoryNames, c) {
				name = c // already a contract name
			}
		}
		found[name] = true
	}
	var categories []string
	for _, name := range categoryNames {
		if found[name] {
			categories = append(categories, name)
		}
	}
	action, ok := serviceActions[strings.TrimSpace(a.SuggestAction)]
	if !ok {
		action = strings.ToLower(strings.TrimSpace(a.SuggestAction))
	}
	return assessment{Risk: risk, Categories: categories, ServiceAction: action, SuggestAnswer: a.SuggestAnswer}
}
