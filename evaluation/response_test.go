package evaluation

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestParseResponse(t *testing.T) {
	body := `{"model":"service-1.0.0","answers":{
		"a":{"type":"noul","noul":0.95},
		"b":{"type":"choice","choice":"x","probabilities":{"x":0.6,"y":0.4},"confidence":0.2},
		"c":{"type":"score","score":1.81,"legend":{"0":"lo"},"probabilities":{"0":1},"confidence":0.61},
		"d":{"type":"choice","confidence":"high"},
		"e":"not an answer",
		"f":{"type":"choice","choice":3,"confidence":0.5},
		"g":{"type":"choice","choice":"\u4e2d\"x","confidence":0.5},
		"a":{"type":"noul","noul":0.5}},
		"usage":{"input_tokens":123,"output_tokens":4}}`
	resp, err := ParseResponse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Model != "service-1.0.0" || !resp.HasUsage || resp.InputTokens != 123 {
		t.Errorf("model %q usage %v %d", resp.Model, resp.HasUsage, resp.InputTokens)
	}
	if !resp.HasOutputTokens || resp.OutputTokens != 4 {
		t.Errorf("output tokens %v %d, want 4", resp.HasOutputTokens, resp.OutputTokens)
	}
	if a, ok := resp.Find("a"); !ok || a.Noul != 0.5 || !a.HasNoul || a.Type != TypeNoul {
		t.Errorf("a: %+v (a repeated id keeps its last answer)", a)
	}
	if b, _ := resp.Find("b"); b.Confidence != 0.2 || !b.HasConfidence || b.Type != TypeChoice || b.Choice != "x" || !b.HasChoice {
		t.Errorf("b: %+v", b)
	}
	if c, _ := resp.Find("c"); c.Confidence != 0.61 || c.Type != TypeScore || c.Score != 1.81 || !c.HasScore {
		t.Errorf("c: %+v", c)
	}
	if d, _ := resp.Find("d"); d.HasConfidence || d.HasChoice {
		t.Errorf("d: a string confidence read as a number: %+v", d)
	}
	if f, _ := resp.Find("f"); f.HasChoice || f.Choice != "" {
		t.Errorf("f: a number choice read as a key: %+v", f)
	}
	if g, _ := resp.Find("g"); !g.HasChoice || g.Choice != "中\"x" {
		t.Errorf("g: an escaped choice read as %q", g.Choice)
	}
	if e, ok := resp.Find("e"); !ok || e.Type != "" || e.HasConfidence || e.HasNoul {
		t.Errorf("e: a non-object answer read as %+v %v, want one with no type", e, ok)
	}
	// A repeated key's last value wins, whatever its type.
	resp, _ = ParseResponse([]byte(`{"model":"m","model":null,"answers":{"a":{"type":"choice","type":1,"confidence":0.9},"b":{"type":"noul","noul":1},"b":null}}`))
	if a, _ := resp.Find("a"); resp.Model != "" || a.Type != "" {
		t.Errorf("repeated keys: model %q, a.type %q, want both empty", resp.Model, a.Type)
	}
	if b, _ := resp.Find("b"); b.HasNoul {
		t.Error("repeated answer: the first value won")
	}
}

func TestParseResponseUnreadable(t *testing.T) {
	for _, body := range []string{"", "null", "[]", `{"model":"x"`, `{"model":"x"} {}`, "\xff", `{"answers":{"a":{"noul":0.5,}}}`} {
		if _, err := ParseResponse([]byte(body)); err == nil {
			t.Errorf("%q: read as a response", body)
		}
	}
	// Keys are case-sensitive, as the service (Python) writes and reads them.
	if resp, err := ParseResponse([]byte(`{"Model":"m","MODEL":"m"}`)); err != nil || resp.Model != "" {
		t.Errorf("a key in another case read as the model: %q %v", resp.Model, err)
	}
	resp, err := ParseResponse([]byte(`{"usage":{"input_tokens":-3},"model":7}`))
	if err != nil || resp.HasUsage || resp.Model != "" {
		t.Errorf("bad usage or model read: %+v %v", resp, err)
	}
	resp, err = ParseResponse([]byte(`{"usage":{"input_tokens":5,"output_tokens":"4"}}`))
	if err != nil || !resp.HasUsage || resp.HasOutputTokens {
		t.Errorf("a string output_tokens read as a count: %+v %v", resp, err)
	}
}

func FuzzParseResponse(f *testing.F) {
	f.Add([]byte(`{"model":"m","answers":{"a":{"type":"noul","noul":0.5}},"usage":{"input_tokens":3}}`))
	f.Add([]byte(`{"answers":{"a":{"type":"choice","confidence":1e400}}}`))
	f.Add([]byte(`{"usage":{"input_tokens":`))
	f.Add([]byte(`{"model":"`))
	f.Add([]byte(`{"answers":{"a":{"type":"`))
	f.Fuzz(func(t *testing.T, body []byte) {
		resp, err := ParseResponse(body)
		if err != nil {
			return
		}
		// Whatever is read agrees with encoding/json where that decoder
		// reads the body too. The oracle is a map, not a struct: the
		// service's keys are case-sensitive, as in Python, while
		// encoding/json matches a struct's fields in any case ("modEl").
		// A repeated key's last value wins in both; a model that is not a
		// string reads as none.
		var std map[string]json.RawMessage
		if json.Unmarshal(body, &std) == nil && !strings.ContainsAny(string(body), "\\") {
			var model string
			if json.Unmarshal(std["model"], &model) != nil {
				model = ""
			}
			if model != resp.Model {
				t.Fatalf("model %q, encoding/json reads %q", resp.Model, model)
			}
		}
		if resp.HasUsage && resp.InputTokens < 0 {
			t.Fatal("negative usage")
		}
	})
}

// responseBody builds a 200 body with n questions, as the simulator answers.
func responseBody(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"service-1.0.0","answers":{`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, `"q%d":{"type":"noul","noul":0.93}`, i)
		case 1:
			fmt.Fprintf(&b, `"q%d":{"type":"choice","choice":"yes","probabilities":{"yes":0.81,"no":0.12,"maybe":0.07},"confidence":0.715}`, i)
		default:
			fmt.Fprintf(&b, `"q%d":{"type":"score","score":2.1,"legend":{"0":"bad","1":"ok","2":"good","3":"great"},"probabilities":{"0":0.04,"1":0.12,"2":0.54,"3":0.3},"confidence":0.54}`, i)
		}
	}
	b.WriteString(`},"usage":{"input_tokens":91234,"output_tokens":150}}`)
	return []byte(b.String())
}

func BenchmarkParseResponse50(b *testing.B) {
	body := responseBody(50)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseResponse(body); err != nil {
			b.Fatal(err)
		}
	}
}

// The baseline issue 7 measures against: encoding/json into map[string]any.
func BenchmarkParseResponse50StdMap(b *testing.B) {
	body := responseBody(50)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			b.Fatal(err)
		}
	}
}

// A 200 answers its request only when every question has an answer of its
// type with the type's value.
func TestAnswersAll(t *testing.T) {
	qs := []Question{{ID: "a", Type: TypeNoul}, {ID: "b", Type: TypeChoice}, {ID: "c", Type: TypeScore}}
	for _, tc := range []struct {
		body string
		want bool
	}{
		{`{"model":"m","answers":{"a":{"type":"noul","noul":0.9},"b":{"type":"choice","choice":"x","confidence":0.8},"c":{"type":"score","score":3,"confidence":0.7}}}`, true},
		{`{"model":"m","detail":"internal error, retry"}`, false},
		{`{"model":"m","answers":{}}`, false},
		{`{"model":"m","answers":{"a":{"type":"noul","noul":0.9},"b":{"type":"choice","choice":"x"}}}`, false},
		{`{"model":"m","answers":{"a":{"type":"noul","noul":null},"b":{"type":"choice","choice":"x"},"c":{"type":"score","score":3}}}`, false},
		{`{"model":"m","answers":{"a":{"type":"choice","choice":"x"},"b":{"type":"choice","choice":"x"},"c":{"type":"score","score":3}}}`, false},
		{`{"model":"m","answers":{"a":{"type":"noul","noul":0.9},"b":{"type":"choice","choice":1},"c":{"type":"score","score":3}}}`, false},
		{`{"model":"m","answers":{"a":{"type":"noul","noul":0.9},"b":{"type":"choice","choice":"x"},"c":{"type":"score","score":3},"c":{"type":"score"}}}`, false},
		{`{"model":"m","answers":{"a":{"type":"noul","noul":0.9},"b":{"type":"choice","choice":"x"},"c":{"type":"score"},"c":{"type":"score","score":2}}}`, true},
	} {
		resp, err := ParseResponse([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if got := resp.AnswersAll(qs); got != tc.want {
			t.Errorf("%s: AnswersAll %v, want %v", tc.body, got, tc.want)
		}
	}
}
