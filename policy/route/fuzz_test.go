package route

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/systemone/systemone-gateway/evaluation"
)

var fuzzQuestions = []evaluation.Question{q("a", "noul"), q("中", "choice"), q("c", "score")}

// FuzzDecide checks the whole reading path, evaluation.ParseResponse then
// Decide, against an encoding/json reading of the same body: no panic, human
// with unreadable_response whenever the body is not a valid answer set, and
// the same model and confidences whenever it is.
func FuzzDecide(f *testing.F) {
	for _, b := range [][]byte{
		body("service-1.0.0", noul("a", "0.85"), choice("中", "0.5"), score("c", "0.61")),
		body("service-2.0.0", noul("a", "5e-1"), choice("中", "1"), score("c", "0")),
		body("service-1.0.0", noul("a", "0.1234567890123456789"), `"\u4e2d":{"type":"choice","confidence":1E0}`, score("c", "-0")),
		body("service-1.0.0", noul("a", "0.5"), choice("中", "1.5"), score("c", "0.61")),
		body("service-1.0.0", noul("a", `"0.5"`), choice("中", "0.5"), score("c", "0.61"), score("c", "null")),
		body("service-1.0.0", noul("a", "NaN"), choice("中", "Infinity"), score("c", "-Infinity")),
		[]byte(`{"model":"m","answers":{"a":{"type":"noul","noul":1e-999},"中":{"type":"choice","confidence":0},"c":{"type":"score","confidence":1}}}`),
		[]byte(`{"model":"m","answers":{"a":{"type":"noul","noul":0.0000000025},"中":{"type":"choice","confidence":0},"c":{"type":"score","confidence":1}}}`),
		[]byte(`{"model":"m","answers":{"a":{"type":"noul","noul":0.5}}`),
		[]byte(`[]`), []byte(`null`), []byte(`"\ud800"`), []byte("{\"model\":\"\xff\"}"), []byte("{\"model\":\"\xed\xa0\x80\"}"), {},
	} {
		f.Add(b)
	}
	r := newRouter(f, Config{Pins: []Pin{{Version: "service-1.0.0", Noul: ptr(0.7), Choice: ptr(0.5), Score: ptr(0.6)}}})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := decideBody(r, fuzzQuestions, b, Signal{})
		if d.Reason != ReasonUnreadableResponse {
			for _, dq := range d.Questions {
				if !dq.HasConfidence || !inUnit(dq.Confidence) || math.Signbit(dq.Confidence) {
					t.Fatalf("question %s: confidence %v (known %v) in a readable answer set: %q", dq.ID, dq.Confidence, dq.HasConfidence, b)
				}
			}
		}
		if !utf8.Valid(b) || !json.Valid(b) {
			// The parser reads as the upstream's Python json module does:
			// it takes NaN, Infinity and UTF-8 encoded surrogates, which
			// encoding/json rejects, and rejects invalid UTF-8, which
			// encoding/json replaces. There the two readings differ.
			return
		}
		model, confs, valid := oracle(b, fuzzQuestions)
		if !valid {
			if d.Route != RouteHuman || d.Reason != ReasonUnreadableResponse {
				t.Fatalf("not an answer set, routed %s/%s: %q", d.Route, d.Reason, b)
			}
			return
		}
		if d.Reason == ReasonUnreadableResponse && bytes.Count(b, []byte("["))+bytes.Count(b, []byte("{")) > 1000 {
			return // possibly over the parser's nesting bound, which is Python's, not encoding/json's
		}
		if d.Reason == ReasonUnreadableResponse || d.Model != model {
			t.Fatalf("answer set from %q routed %s/%s with model %q: %q", model, d.Route, d.Reason, d.Model, b)
		}
		for i, dq := range d.Questions {
			if !confs[i].matches(dq.Confidence) {
				t.Fatalf("question %s: confidence %v, encoding/json reading gives %v: %q", dq.ID, dq.Confidence, confs[i].v, b)
			}
		}
	})
}

// oracleConfidence is a confidence as the oracle computes it.
type oracleConfidence struct {
	v float64
	// exact is |2p-1| for noul p as a rational, nil for choice and score,
	// and when p was too long or too large to compute it so.
	exact *big.Rat
	noul  bool
}

// matches reports whether c, a confidence Decide computed, is this one: the
// same number for choice and score; for noul, |2p-1| rounded to 9 decimals,
// which is the decimal itself when it has at most 9 (every p the service
// writes), else within half a unit of the 9th decimal.
func (o oracleConfidence) matches(c float64) bool {
	if !o.noul || o.exact != nil && new(big.Rat).Mul(o.exact, big.NewRat(1e9, 1)).IsInt() {
		return c == o.v
	}
	return math.Abs(c-o.v) <= 5e-10+1e-15
}

// oracle reads body with encoding/json as the contract defines an answer
// set: a JSON object with a non-empty string `model` and, under `answers`,
// for each question an object of its type whose confidence (`confidence`,
// or |2p-1| for `noul` p, computed exactly) is a number in 0..1.
func oracle(body []byte, qs []evaluation.Question) (model string, confs []oracleConfidence, valid bool) {
	var top map[string]json.RawMessage
	if !json.Valid(body) || json.Unmarshal(body, &top) != nil {
		return "", nil, false
	}
	if !isJSON(top["model"], '"') || json.Unmarshal(top["model"], &model) != nil || model == "" {
		return "", nil, false
	}
	var answers map[string]json.RawMessage
	if !isJSON(top["answers"], '{') || json.Unmarshal(top["answers"], &answers) != nil {
		return "", nil, false
	}
	for _, q := range qs {
		var fields map[string]json.RawMessage
		var typ string
		if !isJSON(answers[q.ID], '{') || json.Unmarshal(answers[q.ID], &fields) != nil ||
			!isJSON(fields["type"], '"') || json.Unmarshal(fields["type"], &typ) != nil || typ != q.Type {
			return "", nil, false
		}
		name := "confidence"
		if q.Type == evaluation.TypeNoul {
			name = "noul"
		}
		num := fields[name]
		if len(num) == 0 || num[0] != '-' && (num[0] < '0' || num[0] > '9') {
			return "", nil, false
		}
		v, err := strconv.ParseFloat(string(num), 64)
		if err != nil || !(v >= 0 && v <= 1) {
			return "", nil, false
		}
		c := oracleConfidence{v: math.Abs(v), noul: q.Type == evaluation.TypeNoul}
		if c.noul {
			c.v = math.Abs(2*v - 1) // numbers too long or too large for exact arithmetic
			if len(num) <= 64 && smallExponent(num) {
				r, _ := new(big.Rat).SetString(string(num))
				c.exact = r.Abs(r.Sub(r.Add(r, r), big.NewRat(1, 1)))
				c.v, _ = c.exact.Float64()
			}
		}
		confs = append(confs, c)
	}
	return model, confs, true
}

// smallExponent reports whether num's exponent, if any, is within ±400,
// where exact arithmetic stays cheap.
func smallExponent(num []byte) bool {
	i := bytes.IndexAny(num, "eE")
	if i < 0 {
		return true
	}
	e, err := strconv.Atoi(string(num[i+1:]))
	return err == nil && -400 <= e && e <= 400
}

// isJSON reports whether raw is present and starts as a value of its kind.
func isJSON(raw json.RawMessage, first byte) bool {
	return len(raw) > 0 && raw[0] == first
}
