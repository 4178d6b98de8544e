package guardrails

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/bench/payload"
	"github.com/systemone/systemone-gateway/evaluation"
)

// encoderRequest is the body as encoding/json writes it, the reference.
func encoderRequest(t testing.TB, model string, msgs []Message) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(serviceRequest{Model: model, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzAppendRequest: the request body is byte for byte what encoding/json
// writes, whatever the text holds.
func FuzzAppendRequest(f *testing.F) {
	for _, seed := range []string{
		"plain text longer than eight bytes",
		"客户反映包裹比承诺的时间晚到了两天。“引号”，全角？",
		"escapes \" \\ / \b \f \n \r \t \x01 \x1f <html> & done",
		"line\u2028separator\u2029 and \u2027\u202a",
		"invalid \xff utf-8 \xed\xa0\x80 surrogate \xe4\xb8",
		"mixed 中文 and English, 한국어, カタカナ, ｆｕｌｌ, 😀",
		strings.Repeat("ab", 20) + "\n" + strings.Repeat("é", 9),
	} {
		f.Add("Service-Guardrails-Text", seed, "assistant")
	}
	f.Fuzz(func(t *testing.T, model, content, role string) {
		msgs := []Message{{Role: RoleUser, Content: content}, {Role: role, Content: content + role}}
		want := encoderRequest(t, model, msgs)
		got := appendRequest(nil, model, msgs)
		if !bytes.Equal(got, want) {
			t.Fatalf("appendRequest:\n got %q\nwant %q", got, want)
		}
	})
}

func TestRequestSize(t *testing.T) {
	msgs := []Message{{RoleUser, strings.Repeat("a", 1000)}, {RoleAssistant, "ok"}}
	if n, got := requestSize("m", msgs), len(appendRequest(nil, "m", msgs)); n < got {
		t.Errorf("requestSize %d, body %d bytes: the buffer would grow", n, got)
	}
}

// BenchmarkEncodeRequest measures encoding the service request for the
// benchmark payloads' states, side by side with encoding/json.
func BenchmarkEncodeRequest(b *testing.B) {
	for _, p := range payload.All() {
		if p.Size != payload.Large {
			continue
		}
		req, err := evaluation.ParseRequest(p.Body)
		if err != nil {
			b.Fatal(err)
		}
		msgs, err := Messages(req.State)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p.Name+"/append", func(b *testing.B) {
			b.SetBytes(int64(len(req.State)))
			b.ReportAllocs()
			for b.Loop() {
				appendRequest(make([]byte, 0, requestSize("Service-Guardrails-Text", msgs)), "Service-Guardrails-Text", msgs)
			}
		})
		b.Run(p.Name+"/std_encoder", func(b *testing.B) {
			b.SetBytes(int64(len(req.State)))
			b.ReportAllocs()
			for b.Loop() {
				encoderRequest(b, "Service-Guardrails-Text", msgs)
			}
		})
	}
}
