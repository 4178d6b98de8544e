package evaluation

import (
	"encoding/json"
	"testing"

	"github.com/systemone/systemone-gateway/bench/payload"
)

// BenchmarkParseRequest measures the gateway's request inspection (syntax,
// validation, token estimate) on each benchmark payload, side by side with
// the baseline issue 7 names: encoding/json into map[string]any, which
// checks syntax only. The 256 KiB bodies with 50 questions are the ones the
// target (at least 3x faster) is about.
func BenchmarkParseRequest(b *testing.B) {
	for _, p := range payload.All() {
		b.Run(p.Name+"/inspect", func(b *testing.B) {
			b.SetBytes(int64(len(p.Body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseRequest(p.Body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(p.Name+"/std_map", func(b *testing.B) {
			b.SetBytes(int64(len(p.Body)))
			b.ReportAllocs()
			for b.Loop() {
				var m map[string]any
				if err := json.Unmarshal(p.Body, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
