// Package evaluation knows the wire format of the evaluation service
// (POST /v1/systemone): it inspects a request body in one pass (syntax, the
// upstream's validation rules, an input-token estimate) and writes validation
// errors in the upstream's own 422 form.
package evaluation

// DefaultModel is the model the upstream uses when a request omits `model`.
const DefaultModel = "service-latest"

// The question types the evaluation service defines.
const (
	TypeNoul   = "noul"
	TypeChoice = "choice"
	TypeScore  = "score"
)

// Request is what the gateway needs to know of an evaluation request. Byte
// slices point into the body it was parsed from; they are valid as long as the
// body is.
type Request struct {
	// Model is the requested model, "" when the body omits it (or sends null).
	Model string
	// State is the raw JSON of `state` (a string, an object or an array).
	State []byte
	// Questions are in the order the body lists them.
	Questions []Question
	// EstimatedTokens is the input-token estimate: the state once plus every
	// question's instructions and criteria (option keys included). See
	// EstimateTokens.
	EstimatedTokens int64

	// inline holds the questions of a request with few: the Request and
	// its questions in one allocation.
	inline [4]Question
}

// Question is one entry of the request's `questions` map.
type Question struct {
	// ID is the caller's question id, unescaped.
	ID string
	// Type is TypeNoul, TypeChoice or TypeScore.
	Type string
}

// ModelOrDefault returns the requested model, or DefaultModel when none was named.
func (r *Request) ModelOrDefault() string {
	if r.Model == "" {
		return DefaultModel
	}
	return r.Model
}
