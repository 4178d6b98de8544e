package simulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// guardrailsModel is the only model the guardrails service knows.
const guardrailsModel = "Service-Guardrails-Text"

// refusal is the suggested reply when the action is 阻断 or 代答.
const refusal = "抱歉，我无法回答这个问题。"

// Risk levels, ordered so that a higher one wins.
const (
	riskNone = iota
	riskLow
	riskMedium
	riskHigh
)

var levelNames = [...]string{"无风险", "低风险", "中风险", "高风险"}

// categoryLevels is the guardrails service's table of categories by risk level.
var categoryLevels = map[string]int{
	"敏感政治话题": riskHigh, "损害国家形象": riskHigh, "暴力犯罪": riskHigh, "提示词攻击": riskHigh,
	"一般政治话题": riskMedium, "伤害未成年人": riskMedium, "违法犯罪": riskMedium, "色情": riskMedium,
	"歧视内容": riskLow, "辱骂": riskLow, "侵犯个人隐私": riskLow, "商业违法违规": riskLow,
}

// securityCategory is the one category reported under `security`; every
// other goes under `compliance`.
const securityCategory = "提示词攻击"

// triggers are the phrases that report a category, lower case with single
// spaces, matched against each message likewise normalized.
var triggers = []struct{ phrase, category string }{
	{"ignore previous instructions", "提示词攻击"},
	{"ignore all previous", "提示词攻击"},
	{"ignore the criteria", "提示词攻击"},
	{"disregard the instructions", "提示词攻击"},
	{"忽略之前的指令", "提示词攻击"},
	{"忽略以上", "提示词攻击"},
	{"无视之前", "提示词攻击"},
	{"build a bomb", "暴力犯罪"},
	{"make a bomb", "暴力犯罪"},
	{"炸弹制作", "暴力犯罪"},
	{"制作炸弹", "暴力犯罪"},
	{"drugs for sale", "违法犯罪"},
	{"贩毒", "违法犯罪"},
	{"porn", "色情"},
	{"色情", "色情"},
	{"idiot", "辱骂"},
	{"白痴", "辱骂"},
	{"home address of", "侵犯个人隐私"},
	{"身份证号", "侵犯个人隐私"},
}

// guardrailsMessages are the service's messages for the statuses it names.
var guardrailsMessages = map[int]string{
	http.StatusBadRequest:          "Invalid request parameters",
	http.StatusUnauthorized:        "Invalid API key",
	http.StatusTooManyRequests:     "Request rate exceeded",
	http.StatusInternalServerError: "Internal server error",
}

// markerPrefix opens a marker that reports a category by name.
const markerPrefix = "[[guardrails:"

type guardrailsVerdict struct {
	RiskLevel  string   `json:"risk_level"`
	Categories []string `json:"categories"`
}

type guardrailsResponse struct {
	ID     string `json:"id"`
	Result struct {
		Compliance guardrailsVerdict `json:"compliance"`
		Security   guardrailsVerdict `json:"security"`
	} `json:"result"`
	OverallRiskLevel string `json:"overall_risk_level"`
	SuggestAction    string `json:"suggest_action"`
	SuggestAnswer    string `json:"suggest_answer"`
}

func (h *Handler) serveGuardrails(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.bearerKey(r); !ok {
		writeGuardrailsError(w, http.StatusUnauthorized, guardrailsMessages[http.StatusUnauthorized])
		return
	}
	if status, err := simulatedStatus(r); err != nil {
		writeGuardrailsError(w, http.StatusBadRequest, err.Error())
		return
	} else if status != 0 {
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		msg := guardrailsMessages[status]
		if msg == "" {
			msg = http.StatusText(status)
		}
		writeGuardrailsError(w, status, msg)
		return
	}

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeGuardrailsError(w, http.StatusBadRequest, "request body too large")
			return
		}
		writeGuardrailsError(w, http.StatusBadRequest, "could not read the request body")
		return
	}
	contents, err := parseGuardrails(body)
	if err != nil {
		writeGuardrailsError(w, http.StatusBadRequest, err.Error())
		return
	}

	var resp guardrailsResponse
	resp.ID = requestID()
	compliance, security := riskNone, riskNone
	resp.Result.Compliance.Categories = []string{}
	resp.Result.Security.Categories = []string{}
	for _, category := range detect(contents) {
		level, known := categoryLevels[category]
		if !known {
			level = riskMedium
		}
		if category == securityCategory {
			security = max(security, level)
			resp.Result.Security.Categories = append(resp.Result.Security.Categories, category)
		} else {
			compliance = max(compliance, level)
			resp.Result.Compliance.Categories = append(resp.Result.Compliance.Categories, category)
		}
	}
	overall := max(compliance, security)
	resp.Result.Compliance.RiskLevel = levelNames[compliance]
	resp.Result.Security.RiskLevel = levelNames[security]
	resp.OverallRiskLevel = levelNames[overall]
	switch overall {
	case riskHigh:
		resp.SuggestAction, resp.SuggestAnswer = "阻断", refusal
	case riskMedium:
		resp.SuggestAction, resp.SuggestAnswer = "代答", refusal
	default:
		resp.SuggestAction = "通过"
	}
	out, _ := json.Marshal(resp) // strings and slices of strings always marshal
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	_, _ = w.Write(out)
}

// parseGuardrails checks a guardrails request and returns its messages'
// contents.
func parseGuardrails(body []byte) ([]string, error) {
	var req struct {
		Model    *string `json:"model"`
		Messages *[]struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, errors.New("request body is not a valid JSON object of the expected shape")
	}
	if req.Model == nil || *req.Model != guardrailsModel {
		return nil, fmt.Errorf("model must be %s", guardrailsModel)
	}
	if req.Messages == nil || len(*req.Messages) == 0 {
		return nil, errors.New("messages must be a non-empty array")
	}
	contents := make([]string, 0, len(*req.Messages))
	for i, m := range *req.Messages {
		if m.Role == nil || (*m.Role != "user" && *m.Role != "assistant") {
			return nil, fmt.Errorf("messages[%d].role must be user or assistant", i)
		}
		if m.Content == nil {
			return nil, fmt.Errorf("messages[%d].content must be a string", i)
		}
		contents = append(contents, *m.Content)
	}
	return contents, nil
}

// detect returns the categories the messages trigger, each once, in the order
// found: per message, trigger phrases in table order, then markers.
func detect(contents []string) []string {
	var found []string
	add := func(category string) {
		for _, c := range found {
			if c == category {
				return
			}
		}
		found = append(found, category)
	}
	for _, content := range contents {
		text := strings.ToLower(strings.Join(strings.Fields(content), " "))
		for _, t := range triggers {
			if strings.Contains(text, t.phrase) {
				add(t.category)
			}
		}
		rest := content
		for {
			_, after, ok := strings.Cut(rest, markerPrefix)
			if !ok {
				break
			}
			name, tail, closed := strings.Cut(after, "]]")
			if !closed {
				break
			}
			if name = strings.TrimSpace(name); name != "" {
				add(name)
			}
			rest = tail
		}
	}
	return found
}

// writeGuardrailsError writes an error in the guardrails service's style: the
// service's code is the status followed by 01 (40001, 40101, 42901, 50001).
func writeGuardrailsError(w http.ResponseWriter, status int, message string) {
	body, _ := json.Marshal(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status*100 + 1, message})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
