package route

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/evaluation"
)

// response50 returns a realistic 200 body for 50 questions of mixed types
// (choice with 4 options, score with 5 tiers), and the questions.
func response50() ([]evaluation.Question, []byte) {
	var qs []evaluation.Question
	var answers []string
	for i := range 50 {
		id := fmt.Sprintf("q%02d_relevance_check", i)
		switch i % 3 {
		case 0:
			qs = append(qs, q(id, "noul"))
			answers = append(answers, fmt.Sprintf(`"%s":{"type":"noul","noul":0.9%d}`, id, i%10))
		case 1:
			qs = append(qs, q(id, "choice"))
			answers = append(answers, fmt.Sprintf(`"%s":{"type":"choice","choice":"relevant",`+
				`"probabilities":{"relevant":0.82,"partially_relevant":0.1,"irrelevant":0.05,"off_topic":0.03},"confidence":0.7%d}`, id, i%10))
		default:
			qs = append(qs, q(id, "score"))
			answers = append(answers, fmt.Sprintf(`"%s":{"type":"score","score":3.41,`+
				`"legend":{"0":"unusable","1":"poor","2":"fair","3":"good","4":"excellent"},`+
				`"probabilities":{"0":0.01,"1":0.02,"2":0.07,"3":0.35,"4":0.55},"confidence":0.6%d}`, id, i%10))
		}
	}
	return qs, []byte(`{"model":"service-1.0.0","answers":{` + strings.Join(answers, ",") +
		`},"usage":{"input_tokens":5120,"output_tokens":150}}`)
}

// BenchmarkAnswers50 measures, in one run, reading and routing a 50-question
// response as the handler does, evaluation.ParseResponse then Decide
// (parse_decide), against decoding it with encoding/json into map[string]any
// (map_any), the baseline that reads no answer yet. decide is Decide alone.
func BenchmarkAnswers50(b *testing.B) {
	questions, body := response50()
	r := newRouter(b, testConfig())
	resp, err := evaluation.ParseResponse(body)
	if err != nil {
		b.Fatal(err)
	}
	if d := r.Decide(questions, resp, Signal{}); d.Reason != ReasonConfident {
		b.Fatalf("benchmark body routes %s/%s", d.Route, d.Reason)
	}

	b.Run("parse_decide", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			resp, err := evaluation.ParseResponse(body)
			if err != nil {
				b.Fatal(err)
			}
			r.Decide(questions, resp, Signal{})
		}
	})
	b.Run("decide", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.Decide(questions, resp, Signal{})
		}
	})
	b.Run("map_any", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var v map[string]any
			if err := json.Unmarshal(body, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkSetHeaders50(b *testing.B) {
	questions, body := response50()
	d := decideBody(newRouter(b, testConfig()), questions, body, Signal{})
	b.ReportAllocs()
	for b.Loop() {
		d.SetHeaders(make(map[string][]string, 8))
	}
}
