package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/review/record"
)

// Plans: the one look of a `uniform` calibration, fixed before labelling
// began, in a way `verify` can check.
//
// The one-look method (calibrate --method uniform) is valid for a
// number of labels fixed before any is seen; run after every label, with
// the first threshold kept, its chance of a wrong threshold grows with
// every look. So its certificates need a plan: PUT /plans stores, for a
// group, the number of entries its one look takes, with the time it was
// stored by this handler's clock, only while the group's (model, type)
// has no label yet, and never changes it. calibrate --method uniform
// --plan takes exactly that many entries; verify checks that the plan
// predates the group's first label and that the certificate used exactly
// that many entries. Kept under
//
//	<prefix>review:{<stream>}:plans       hash: model\x1ftype\x1fquestion\x1forg -> plan (record.Plan)
//	<prefix>review:{<stream>}:labelling   hash: model\x1ftype -> when its first audited label was stored

func (s *store) plansKey() string     { return s.base + "plans" }
func (s *store) labellingKey() string { return s.base + "labelling" }

// maxPlanBody bounds a PUT /plans body.
const maxPlanBody = 64 << 10

// planScript stores a plan unless its (model, type) has a label or the
// group a plan: KEYS plans, labelling; ARGV group field, plan, (model,
// type) field. It answers "ok", "began" or "exists".
var planScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[2], ARGV[3]) == 1 then return 'began' end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 'exists' end
return 'ok'`)

// servePlans answers GET /plans and PUT /plans.
func (h *Handler) servePlans(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.listPlans(w, r)
	case http.MethodPut:
		h.putPlan(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT")
		writeDetail(w, http.StatusMethodNotAllowed, "method_not_allowed")
	}
}

func (h *Handler) listPlans(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.store.timeout)
	defer cancel()
	raw, err := h.store.client.HGetAll(ctx, h.store.plansKey()).Result()
	if err != nil {
		h.storeFailed(w, "plans", err)
		return
	}
	doc := record.Plans{Plans: []record.Plan{}}
	for _, v := range raw {
		var p record.Plan
		if json.Unmarshal([]byte(v), &p) == nil {
			doc.Plans = append(doc.Plans, p)
		}
	}
	slices.SortFunc(doc.Plans, func(a, b record.Plan) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Type, b.Type), cmp.Compare(a.Question, b.Question), cmp.Compare(a.Org, b.Org))
	})
	writeJSON(w, http.StatusOK, doc)
}

// putPlan stores a plan: `{"model", "type", "entries", "question"?,
// "org"?}` -> 201 with the plan and its `created`; 409 plan_exists when
// the group has one, 409 labelling_began when its (model, type) has a
// label; 422 (list form) for a bad body.
func (h *Handler) putPlan(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPlanBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeDetail(w, http.StatusRequestEntityTooLarge, "request_too_large")
		}
		return
	}
	p, errs := parsePlan(raw)
	if errs.any() {
		errs.write(w)
		return
	}
	p.Created = h.clock()().UTC().Format(time.RFC3339Nano)
	b, _ := json.Marshal(p) // strings and an int
	ctx, cancel := context.WithTimeout(r.Context(), h.store.timeout)
	defer cancel()
	outcome, err := planScript.Run(ctx, h.store.client, []string{h.store.plansKey(), h.store.labellingKey()},
		p.Key(), string(b), labellingField(p.Model, p.Type)).Text()
	if err != nil {
		h.storeFailed(w, "plans", err)
		return
	}
	switch outcome {
	case "began":
		writeDetail(w, http.StatusConflict, "labelling_began")
		return
	case "exists":
		writeDetail(w, http.StatusConflict, "plan_exists")
		return
	}
	if ce := h.logger.Check(zap.InfoLevel, "calibration plan stored"); ce != nil {
		ce.Write(zap.String("model", p.Model), zap.String("type", p.Type), zap.String("question", p.Question),
			zap.String("org", p.Org), zap.Int("entries", p.Entries), zap.String("by", authUser(r)), zap.String("stream", h.store.stream))
	}
	writeJSON(w, http.StatusCreated, p)
}

// parsePlan reads a PUT /plans body.
func parsePlan(raw []byte) (record.Plan, errorList) {
	var errs errorList
	var p record.Plan
	top, ok := members(raw)
	if !json.Valid(raw) || !ok {
		errs.add("model_attributes_type", loc("body"), "Input should be a valid dictionary or object to extract fields from", json.RawMessage("{}"), nil)
		return p, errs
	}
	fields := map[string]json.RawMessage{}
	for _, m := range top {
		fields[m.key] = m.value
	}
	text := func(name string, into *string, required bool) {
		v, present := fields[name]
		switch {
		case !present || record.IsNull(v):
			if required {
				errs.add("missing", loc("body", name), "Field required", raw, nil)
			}
		case json.Unmarshal(v, into) != nil:
			errs.add("string_type", loc("body", name), "Input should be a valid string", v, nil)
		case required && *into == "":
			errs.add("string_too_short", loc("body", name), "String should have at least 1 character", v, map[string]any{"min_length": 1})
		}
	}
	text("model", &p.Model, true)
	text("type", &p.Type, true)
	text("question", &p.Question, false)
	text("org", &p.Org, false)
	if p.Type != "" && p.Type != evaluation.TypeNoul && p.Type != evaluation.TypeChoice && p.Type != evaluation.TypeScore {
		expected := literals([]string{evaluation.TypeNoul, evaluation.TypeChoice, evaluation.TypeScore})
		errs.add("literal_error", loc("body", "type"), "Input should be "+expected, jsonString(p.Type), map[string]any{"expected": expected})
	}
	v, present := fields["entries"]
	var n float64
	switch {
	case !present:
		errs.add("missing", loc("body", "entries"), "Field required", raw, nil)
	case !isNumber(v, &n) || n != float64(int(n)):
		errs.add("int_type", loc("body", "entries"), "Input should be a valid integer", v, nil)
	case n < 1:
		errs.add("greater_than_equal", loc("body", "entries"), "Input should be greater than or equal to 1", v, map[string]any{"ge": 1})
	case n > 1e9:
		errs.add("less_than_equal", loc("body", "entries"), "Input should be less than or equal to 1000000000", v, map[string]any{"le": 1e9})
	default:
		p.Entries = int(n)
	}
	return p, errs
}

// labellingField names a (model, type) in the labelling hash.
func labellingField(model, typ string) string { return model + "\x1f" + typ }

// noteLabelling records, for each (model, type) of the audited labels
// just stored, when its first label was: from then on no plan of it is
// taken.
func (s *store) noteLabelling(ctx context.Context, lines []questionLines) error {
	seen := map[string]bool{}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, ql := range lines {
			l := ql[0] // the first answer's: a plan is of a version's own group
			f := labellingField(l.Model, l.Type)
			if l.Audit && !seen[f] {
				seen[f] = true
				p.HSetNX(ctx, s.labellingKey(), f, l.TS)
			}
		}
		return nil
	})
	return err
}
