package simulator

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/evaluation"
)

// The gateway's token estimate is not an upper bound: it is tuned to be
// close on natural text (0.89x to 1.08x, TestEstimatorError). Its stated
// worst case, in docs/limits.md (the token estimate's worst case), is that the input tokens billed
// are at most 4 times the estimate, plus the upstream's framing of each
// question (questionOverhead here), for any tokenizer that makes at most
// one token of each byte of the text (byte-level BPE, and the simulator's
// tokenizer). Why: the estimate counts a quarter token per byte of the
// fields' JSON text and a whole one per CJK character (3 or 4 bytes), so
// it is at least a quarter of the bytes, and the decoded text the
// tokenizer reads is never longer than its JSON. This test draws
// adversarial texts (punctuation, one-letter words, accented letters,
// escapes, emoji, CJK, and mixtures) and checks the bound against both
// tokenizers, and that punctuation reaches it: the bound is tight.
func TestEstimateWorstCase(t *testing.T) {
	alphabets := []string{
		`.,;:!?-()[]{}<>/*+=_~^%$#@&|'`, // one token each, a quarter estimated
		"a a b c d e f ",                // one-letter words
		"éàüßçñøåœ",                     // two bytes, one token
		"😀🚀✨",                           // four bytes
		"客户退款包裹损坏。",                     // CJK
		"\"\\\n\t/",                     // JSON escapes
		"The quick brown fox 12345 ",    // natural
	}
	rng := rand.New(rand.NewPCG(23, 6))
	var worst float64
	for i := range 3000 {
		var texts [3]string
		for j := range texts {
			a := []rune(alphabets[rng.IntN(len(alphabets))])
			if i%3 == 0 { // a mixture
				a = []rune(strings.Join(alphabets, ""))
			}
			var b strings.Builder
			for range 1 + rng.IntN(400) {
				b.WriteRune(a[rng.IntN(len(a))])
			}
			texts[j] = b.String()
		}
		body, _ := json.Marshal(map[string]any{
			"state": texts[0],
			"questions": map[string]any{
				"q1": map[string]any{"type": "noul", "instructions": texts[1]},
				"q2": map[string]any{"type": "choice", "instructions": "pick", "criteria": map[string]any{texts[2]: nil, "b": "x"}},
			},
		})
		req, err := evaluation.ParseRequest(body)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		est := req.EstimatedTokens
		e, err := parseEvaluation(body)
		if err != nil {
			t.Fatal(err)
		}
		framing := int64(questionOverhead * len(req.Questions))
		billed := e.usage().total
		if billed > 4*est+framing {
			t.Fatalf("billed %d > 4 x estimate %d + framing %d for %s", billed, est, framing, body)
		}
		// The worst a byte-level tokenizer can do: one token per byte of
		// the decoded texts (option keys included).
		var bytes int64
		for _, s := range texts {
			bytes += int64(len(s))
		}
		bytes += int64(len("pick") + len("b") + len("x"))
		if bytes > 4*est {
			t.Fatalf("%d bytes > 4 x estimate %d for %s", bytes, est, body)
		}
		if r := float64(billed-framing) / float64(est); r > worst {
			worst = r
		}
	}
	// The bound is tight: a state of punctuation is billed nearly 4 times
	// its estimate (the trial's 1,002 estimated, 4,005 billed).
	body := `{"state":"` + strings.Repeat(".,;:!?", 667) + `","questions":{"q":{"type":"noul","instructions":"x"}}}`
	req, err := evaluation.ParseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	e, err := parseEvaluation([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("punctuation: estimated %d, billed %d", req.EstimatedTokens, e.usage().total)
	if r := float64(e.usage().total) / float64(req.EstimatedTokens); r < 3.9 || r > 4+float64(questionOverhead+1)/float64(req.EstimatedTokens) {
		t.Errorf("punctuation: billed %d, estimated %d (%.2fx), want nearly 4x", e.usage().total, req.EstimatedTokens, r)
	}
	t.Logf("worst billed/estimate drawn: %.2f", worst)
}
