package simulator

import (
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

// textTokens is the simulated tokenizer: each run of ASCII letters and digits
// is ceil(len/4) tokens, every other character that is not white space (CJK
// characters and punctuation included) is one token.
func textTokens(s string) int64 {
	var t tokenizer
	for _, r := range s {
		t.add(r)
	}
	return t.done()
}

// tokenizer counts tokens as textTokens does, one character at a time.
type tokenizer struct {
	n, run int64
}

func (t *tokenizer) addASCII(c byte) {
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
		t.run++
		return
	}
	t.n += (t.run + 3) / 4
	t.run = 0
	if !unicode.IsSpace(rune(c)) {
		t.n++
	}
}

func (t *tokenizer) add(r rune) {
	if r < utf8.RuneSelf {
		t.addASCII(byte(r))
		return
	}
	t.n += (t.run + 3) / 4
	t.run = 0
	if !unicode.IsSpace(r) {
		t.n++
	}
}

func (t *tokenizer) done() int64 { return t.n + (t.run+3)/4 }
