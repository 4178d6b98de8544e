package simulator

import (
	"strconv"
	"strings"
)

// This file is the service's request validation, written from the
// evaluation service's documented types as FastAPI and pydantic v2 would run it. It is
// deliberately not the gateway's evaluation.ParseRequest: the tests compare
// the gateway's 422s with these, two implementations of one specification. The
// models the evaluation service documents, in pydantic's words:
//
//	Text = str | dict[str, Any] | list[Any]
//
//	class NoulCriteria(BaseModel):
//	    true: Text | None = None
//	    false: Text | None = None
//
//	class NoulQuestion(BaseModel):
//	    type: Literal["noul"]
//	    instructions: Text | None            # required; null is what clients send without text
//	    criteria: NoulCriteria | None = None
//
//	class ChoiceQuestion(BaseModel):
//	    type: Literal["choice"]
//	    instructions: Text
//	    criteria: dict[str, Text | None]     # null: an option without a description
//
//	class ScoreQuestion(BaseModel):
//	    type: Literal["score"]
//	    instructions: Text
//	    criteria: list[Text | None] = Field(min_length=2, max_length=10)
//
//	class EvaluationRequest(BaseModel):
//	    state: Text
//	    model: str = "service-latest"
//	    questions: dict[str, Annotated[NoulQuestion | ChoiceQuestion | ScoreQuestion, Field(discriminator="type")]]
//
// Those are the documented types; the service is known to accept more
// than they say: null noul instructions, null score tiers, null choice
// descriptions, and no criteria on a noul question. Everything else typed
// as text (choice and score instructions, `model`) refuses null. After
// the model validates, the handler refuses a choice question with more than
// 255 options with the service's plain-string detail.
//
// FastAPI validates the decoded body with from_attributes=True, so a model
// given something other than an object reports model_attributes_type; it
// prefixes every loc with "body"; errors come in field order, all of them.

// Question types the service defines, in the order the service's union lists them.
const (
	typeNoul   = "noul"
	typeChoice = "choice"
	typeScore  = "score"
)

// Limits the service states.
const (
	maxChoices = 255
	minTiers   = 2
	maxTiers   = 10
)

// tooManyChoices is the service's 422 detail for a choice question over maxChoices.
const tooManyChoices = "Too many choices. Must have at most 255 choices."

// fieldError is one entry of FastAPI's 422 list.
type fieldError struct {
	typ   string
	loc   []any // "body", then object keys (string) and list indexes (int)
	msg   string
	input any         // a decoded value
	ctx   *jsonObject // nil when the error has none
}

// validated is what the rest of the handler needs of a valid request.
type validated struct {
	model string // "" when the body does not name one
}

// validateRequest checks a request body as the service does. It returns the
// 422 body the service answers, or nil for a request it accepts.
func validateRequest(body []byte) (validated, []byte) {
	c := checkRequest(body)
	return c.req, c.answer()
}

// checkRequest decodes and validates a body; a body that does not decode gets one
// json_invalid error.
func checkRequest(body []byte) *checker {
	var c checker
	v, derr := decodeBody(body)
	if derr != nil {
		c.add("json_invalid", []any{"body", derr.pos}, "JSON decode error", newObject(), newObject().set("error", derr.msg))
		return &c
	}
	c.req = c.request(v)
	return &c
}

// answer is the service's 422 body for the checked request, nil when valid.
func (c *checker) answer() []byte {
	switch {
	case len(c.errs) > 0:
		return errorBody(c.errs)
	case c.tooManyChoices:
		return encodeJSON(nil, newObject().set("detail", tooManyChoices))
	}
	return nil
}

func errorBody(errs []fieldError) []byte {
	list := make([]any, len(errs))
	for i, e := range errs {
		o := newObject().set("type", e.typ).set("loc", e.loc).set("msg", e.msg)
		// The service would fail to write NaN or Infinity back (its
		// JSON encoder refuses them); the gateway's contract writes null.
		if hasNonFinite(e.input) {
			o.set("input", nil)
		} else {
			o.set("input", e.input)
		}
		if e.ctx != nil {
			o.set("ctx", e.ctx)
		}
		list[i] = o
	}
	return encodeJSON(nil, newObject().set("detail", list))
}

// checker collects the errors of one request.
type checker struct {
	req            validated
	errs           []fieldError
	tooManyChoices bool
}

func (c *checker) add(typ string, loc []any, msg string, input any, ctx *jsonObject) {
	c.errs = append(c.errs, fieldError{typ, loc, msg, input, ctx})
}

// at returns loc extended by parts, never sharing loc's array.
func at(loc []any, parts ...any) []any {
	return append(append(make([]any, 0, len(loc)+len(parts)), loc...), parts...)
}

func (c *checker) request(v any) validated {
	body := []any{"body"}
	top, ok := v.(*jsonObject)
	if !ok {
		c.add("model_attributes_type", body, "Input should be a valid dictionary or object to extract fields from", v, nil)
		return validated{}
	}
	var req validated
	if state, ok := top.get("state"); ok {
		c.text(at(body, "state"), state, false)
	} else {
		c.add("missing", at(body, "state"), "Field required", top, nil)
	}
	if model, ok := top.get("model"); ok {
		if s, ok := model.(string); ok {
			req.model = s
		} else {
			c.add("string_type", at(body, "model"), "Input should be a valid string", model, nil)
		}
	}
	questions, ok := top.get("questions")
	if !ok {
		c.add("missing", at(body, "questions"), "Field required", top, nil)
		return req
	}
	qs, ok := questions.(*jsonObject)
	if !ok {
		c.add("dict_type", at(body, "questions"), "Input should be a valid dictionary", questions, nil)
		return req
	}
	for _, id := range qs.keys {
		c.question(at(body, "questions", id), qs.values[id])
	}
	return req
}

// question checks one question: the discriminated union picks the model by
// `type`, and the chosen model's errors are located under the tag.
func (c *checker) question(loc []any, v any) {
	q, ok := v.(*jsonObject)
	if !ok {
		c.add("model_attributes_type", loc, "Input should be a valid dictionary or object to extract fields from", v, nil)
		return
	}
	discriminator := newObject().set("discriminator", "'type'")
	tag, ok := q.get("type")
	if !ok {
		c.add("union_tag_not_found", loc, "Unable to extract tag using discriminator 'type'", q, discriminator)
		return
	}
	typ, _ := tag.(string)
	if typ != typeNoul && typ != typeChoice && typ != typeScore {
		const expected = "'noul', 'choice', 'score'"
		name := pyStr(tag)
		c.add("union_tag_invalid", loc,
			"Input tag '"+name+"' found using 'type' does not match any of the expected tags: "+expected, q,
			discriminator.set("tag", name).set("expected_tags", expected))
		return
	}
	loc = at(loc, typ)

	if instructions, ok := q.get("instructions"); ok {
		c.text(at(loc, "instructions"), instructions, typ == typeNoul)
	} else {
		c.add("missing", at(loc, "instructions"), "Field required", q, nil)
	}

	criteria, ok := q.get("criteria")
	loc = at(loc, "criteria")
	switch {
	case typ == typeNoul:
		if ok && criteria != nil {
			c.noulCriteria(loc, criteria)
		}
	case !ok:
		c.add("missing", loc, "Field required", q, nil)
	case typ == typeChoice:
		c.choiceCriteria(loc, criteria)
	default:
		c.scoreCriteria(loc, criteria)
	}
}

func (c *checker) noulCriteria(loc []any, v any) {
	o, ok := v.(*jsonObject)
	if !ok {
		c.add("model_attributes_type", loc, "Input should be a valid dictionary or object to extract fields from", v, nil)
		return
	}
	for _, field := range []string{"true", "false"} {
		if value, ok := o.get(field); ok {
			c.text(at(loc, field), value, true)
		}
	}
}

func (c *checker) choiceCriteria(loc []any, v any) {
	options, ok := v.(*jsonObject)
	if !ok {
		c.add("dict_type", loc, "Input should be a valid dictionary", v, nil)
		return
	}
	for _, key := range options.keys {
		c.text(at(loc, key), options.values[key], true)
	}
	if len(options.keys) > maxChoices {
		c.tooManyChoices = true
	}
}

// scoreCriteria follows pydantic's list validator: items are validated in
// order, and the item past max_length fails the list at once with too_long
// alone; the min_length check runs only when every item is valid.
func (c *checker) scoreCriteria(loc []any, v any) {
	tiers, ok := v.([]any)
	if !ok {
		c.add("list_type", loc, "Input should be a valid list", v, nil)
		return
	}
	n := len(tiers)
	if n > maxTiers {
		c.add("too_long", loc, "List should have at most 10 items after validation, not "+strconv.Itoa(n), tiers,
			newObject().set("field_type", "List").set("max_length", maxTiers).set("actual_length", n))
		return
	}
	before := len(c.errs)
	for i, tier := range tiers {
		c.text(at(loc, i), tier, true)
	}
	if len(c.errs) == before && n < minTiers {
		c.add("too_short", loc, "List should have at least 2 items after validation, not "+strconv.Itoa(n), tiers,
			newObject().set("field_type", "List").set("min_length", minTiers).set("actual_length", n))
	}
}

// text checks a value of type Text (or Text | None when nullable). A value
// that is none of the union's members fails each, in pydantic's smart-union
// form: one error per member, located by the member's name.
func (c *checker) text(loc []any, v any, nullable bool) {
	switch v.(type) {
	case string, *jsonObject, []any:
		return
	case nil:
		if nullable {
			return
		}
	}
	c.add("string_type", at(loc, "str"), "Input should be a valid string", v, nil)
	c.add("dict_type", at(loc, "dict[str,any]"), "Input should be a valid dictionary", v, nil)
	c.add("list_type", at(loc, "list[any]"), "Input should be a valid list", v, nil)
}

func hasNonFinite(v any) bool {
	switch v := v.(type) {
	case nonFinite:
		return true
	case []any:
		for _, item := range v {
			if hasNonFinite(item) {
				return true
			}
		}
	case *jsonObject:
		for _, item := range v.values {
			if hasNonFinite(item) {
				return true
			}
		}
	}
	return false
}

// pyStr is Python's str() of a decoded value, as pydantic writes a tag that
// matches no question type into its message.
func pyStr(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return pyRepr(v)
}

// pyRepr is Python's repr() of a decoded value.
func pyRepr(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case bool:
		if v {
			return "True"
		}
		return "False"
	case string:
		return pyReprString(v)
	case jsonNumber:
		return pyNumber(string(v))
	case nonFinite:
		return map[nonFinite]string{"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}[v]
	case []any:
		parts := make([]string, len(v))
		for i, item := range v {
			parts[i] = pyRepr(item)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *jsonObject:
		parts := make([]string, len(v.keys))
		for i, k := range v.keys {
			parts[i] = pyReprString(k) + ": " + pyRepr(v.values[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return "?"
}
