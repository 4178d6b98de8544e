package guardrails

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/systemone/systemone-gateway/bench/payload"
	"github.com/systemone/systemone-gateway/evaluation"
)

func BenchmarkZZParts(b *testing.B) {
	for _, name := range []string{"256k-en", "256k-zh"} {
		p, _ := payload.Get(name)
		req, _ := evaluation.ParseRequest(p.Body)
		state := req.State
		b.Run(name+"/valid", func(b *testing.B) {
			for b.Loop() {
				evaluation.Valid(state)
			}
		})
		b.Run(name+"/messages", func(b *testing.B) {
			for b.Loop() {
				Messages(state)
			}
		})
		msgs, _ := Messages(state)
		b.Run(name+"/key", func(b *testing.B) {
			for b.Loop() {
				cacheKey("m", msgs)
			}
		})
		b.Run(name+"/encode", func(b *testing.B) {
			for b.Loop() {
				var body bytes.Buffer
				enc := json.NewEncoder(&body)
				enc.SetEscapeHTML(false)
				enc.Encode(serviceRequest{Model: "m", Messages: msgs})
			}
		})
	}
}

func BenchmarkZZEncode(b *testing.B) {
	for _, name := range []string{"256k-en", "256k-zh"} {
		p, _ := payload.Get(name)
		req, _ := evaluation.ParseRequest(p.Body)
		msgs, _ := Messages(req.State)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				appendRequest(make([]byte, 0, requestSize("m", msgs)), "m", msgs)
			}
		})
	}
}
