package simulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

const (
	aliasLatest  = "service-latest"
	aliasPreview = "service-preview"
)

// versionPattern matches a version identifier, which the service accepts
// whether or not it is listed.
var versionPattern = regexp.MustCompile(`^service-[0-9]+\.[0-9]+\.[0-9]+$`)

// modelsBody is the answer of GET /v1/models: the list holds only aliases.
var modelsBody = func() []byte {
	type model struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		ReleaseDate string `json:"release_date"`
	}
	b, err := json.Marshal(struct {
		Models []model `json:"models"`
	}{[]model{
		{aliasLatest, "Latest official release. Default when model is omitted.", "2025-06-16"},
		{aliasPreview, "Latest version whether official or not; moves before service-latest when a preview exists.", "2025-06-16"},
	}})
	if err != nil {
		panic(err)
	}
	return b
}()

func (h *Handler) serveModels(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.bearerKey(r); !ok {
		writeDetail(w, r, http.StatusUnauthorized, "invalid_api_key")
		return
	}
	if status, err := simulatedStatus(r); err != nil {
		writeDetail(w, r, http.StatusBadRequest, err.Error())
		return
	} else if status != 0 {
		writeSimulatedStatus(w, r, status)
		return
	}
	writeJSON(w, r, http.StatusOK, modelsBody)
}

// controls are the test-control headers of an evaluation request.
type controls struct {
	status      int
	version     string
	overloaded  bool
	confidences map[string]json.Number
}

func readControls(r *http.Request) (controls, error) {
	var c controls
	var err error
	if c.status, err = simulatedStatus(r); err != nil {
		return c, err
	}
	c.version = strings.TrimSpace(r.Header.Get("X-Simulator-Version"))
	if strings.ContainsAny(c.version, " \t") {
		return c, fmt.Errorf("X-Simulator-Version %q: want a version name without spaces", c.version)
	}
	if v := r.Header.Get("X-Simulator-Overloaded"); v != "" {
		if c.overloaded, err = strconv.ParseBool(strings.TrimSpace(v)); err != nil {
			return c, fmt.Errorf("X-Simulator-Overloaded %q: want 1 or 0", v)
		}
	}
	if v := r.Header.Get("X-Simulator-Confidence"); v != "" {
		if err := json.Unmarshal([]byte(v), &c.confidences); err != nil {
			return c, fmt.Errorf("X-Simulator-Confidence: want a JSON object of question id to number: %v", err)
		}
		for id, n := range c.confidences {
			if _, err := strconv.ParseFloat(n.String(), 64); err != nil {
				return c, fmt.Errorf("X-Simulator-Confidence: question %q: want a finite number", id)
			}
		}
	}
	return c, nil
}

func (h *Handler) serveEvaluate(w http.ResponseWriter, r *http.Request) {
	start := h.now()
	key, ok := h.bearerKey(r)
	if !ok {
		writeDetail(w, r, http.StatusUnauthorized, "invalid_api_key")
		return
	}
	ctl, err := readControls(r)
	if err != nil {
		writeDetail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if ctl.status != 0 {
		writeSimulatedStatus(w, r, ctl.status)
		return
	}

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeDetail(w, r, http.StatusRequestEntityTooLarge, "request_too_large")
			return
		}
		writeDetail(w, r, http.StatusBadRequest, "There was an error parsing the body")
		return
	}
	req, invalid := validateRequest(body)
	if invalid != nil {
		writeJSON(w, r, http.StatusUnprocessableEntity, invalid)
		return
	}

	version := h.Version
	if ctl.version != "" {
		version = ctl.version
	}
	model, ok := resolveModel(req.model, version)
	if !ok {
		writeDetail(w, r, http.StatusNotFound, "model_not_found")
		return
	}

	// The body is valid; answering needs more of it (option keys, tiers)
	// in the caller's order.
	eval, err := parseEvaluation(body)
	if err != nil {
		writeDetail(w, r, http.StatusInternalServerError, "simulator: "+err.Error())
		return
	}
	usage := eval.usage()
	if over(usage.total, h.budgetTotal) || over(usage.stateAndLongest, h.budgetQuestion) {
		writeDetail(w, r, http.StatusUnprocessableEntity, "max_tokens_exceeded")
		return
	}

	if ok, retryAfter, detail := h.limiter.admit(key, usage.total); !ok {
		w.Header().Set("Retry-After", strconv.FormatInt(retryAfter, 10))
		writeDetail(w, r, http.StatusTooManyRequests, detail)
		return
	}
	if ctl.overloaded || h.overload.hit(h.random) {
		writeDetail(w, r, 529, "overloaded")
		return
	}

	modelStart := h.now()
	if d := time.Duration(h.Latency); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return // nobody is waiting for the answer
		}
	}
	out, err := json.Marshal(response{
		Model:   model,
		Answers: eval.answers(model, ctl.confidences),
		Usage:   usageBody{InputTokens: usage.total, OutputTokens: usage.output},
	})
	if err != nil {
		writeDetail(w, r, http.StatusInternalServerError, "simulator: "+err.Error())
		return
	}
	end := h.now()
	w.Header().Set("X-Service-Model-Ms", millis(end.Sub(modelStart)))
	w.Header().Set("X-Service-Total-Ms", millis(end.Sub(start)))
	writeJSON(w, r, http.StatusOK, out)
}

// response is the body of a 200 from POST /v1/systemone.
type response struct {
	Model   string          `json:"model"`
	Answers json.RawMessage `json:"answers"`
	Usage   usageBody       `json:"usage"`
}

type usageBody struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// resolveModel returns the concrete version that answers for the requested
// model, or false when no such model exists.
func resolveModel(requested, version string) (string, bool) {
	switch requested {
	case "", aliasLatest, aliasPreview:
		return version, true
	}
	if versionPattern.MatchString(requested) {
		return requested, true
	}
	return "", false
}

// simulatedDetails are the details the service gives for statuses it names.
var simulatedDetails = map[int]string{
	http.StatusUnauthorized:        "invalid_api_key",
	http.StatusPaymentRequired:     "insufficient_balance",
	http.StatusNotFound:            "model_not_found",
	http.StatusUnprocessableEntity: "max_tokens_exceeded",
	http.StatusTooManyRequests:     "Rate limit exceeded: simulated by X-Simulator-Status",
	529:                            "overloaded",
}

// writeSimulatedStatus answers the status X-Simulator-Status asks for, with
// the detail the service gives for it, or the status text.
func writeSimulatedStatus(w http.ResponseWriter, r *http.Request, status int) {
	detail := simulatedDetails[status]
	if detail == "" {
		detail = http.StatusText(status)
	}
	if detail == "" {
		detail = "error"
	}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeDetail(w, r, status, detail)
}

// formatHundredths writes a probability or score kept in hundredths as the
// decimal JSON shows: 61 -> 0.61, 100 -> 1.
func formatHundredths(h int) string {
	return strconv.FormatFloat(float64(h)/100, 'f', -1, 64)
}

// formatDerived writes a derived number rounded to four decimals, so JSON
// shows 0.4 rather than 0.39999999999999997.
func formatDerived(x float64) string {
	return strconv.FormatFloat(math.Round(x*1e4)/1e4, 'f', -1, 64)
}
