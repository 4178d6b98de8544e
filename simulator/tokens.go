package simulator

import (
	"bytes"
	"encoding/json"
	"unicode"
	"unicode/utf8"
)

// The service's token budgets: the whole request, and the state plus the
// longest single question.
const (
	maxTotalTokens    = 64000
	maxQuestionTokens = 32000
)

// over reports whether tokens exceed budget; a budget of 0 is off.
func over(tokens, budget int64) bool { return budget > 0 && tokens > budget }

const (
	// questionOverhead stands for the framing the model sees around each
	// question (its type and separators).
	questionOverhead = 4
	// outputPerQuestion is usage.output_tokens per answered question.
	outputPerQuestion = 3
)

// usage is a request's token count.
type usage struct {
	// total is usage.input_tokens: the state once, plus every question's
	// instructions and criteria and questionOverhead.
	total int64
	// stateAndLongest is the state plus the longest single question.
	stateAndLongest int64
	output          int64
}

// usage counts the request's tokens with the simulator's own tokenizer,
// deliberately not the gateway's estimator, which is measured against it.
func (e *evalRequest) usage() usage {
	state := countTokens(e.state)
	u := usage{total: state}
	var longest int64
	for _, q := range e.questions {
		t := questionOverhead + countTokens(q.instructions) + countTokens(q.criteria)
		u.total += t
		longest = max(longest, t)
		u.output += outputPerQuestion
	}
	u.stateAndLongest = state + longest
	return u
}

// countTokens counts the tokens of a JSON value: the text of every string,
// object key (so choice option keys count), number and boolean, read by
// textTokens. Structure and null are free, so "instructions": null costs
// nothing.
func countTokens(value json.RawMessage) int64 {
	if len(value) == 0 {
		return 0
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	var n int64
	for {
		tok, err := dec.Token()
		if err != nil {
			return n // io.EOF; the value was validated before
		}
		switch v := tok.(type) {
		case string:
			n += textTokens(v)
		case json.Number:
			n += textTokens(v.String())
		case bool:
			n++
		}
	}
}

// textTokens is the simulated tokenizer: each run of ASCII letters and digits
// is ceil(len/4) tokens, every other character that is not white space (CJK
// characters and punctuation included) is one token.
func textTokens(s string) int64 {
	var n, run int64
	for _, r := range s {
		if r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			run++
			continue
		}
		n += (run + 3) / 4
		run = 0
		if !unicode.IsSpace(r) {
			n++
		}
	}
	return n + (run+3)/4
}
