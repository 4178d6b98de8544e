package evaluation

import (
	"errors"
	"testing"
)

func TestAskAgain(t *testing.T) {
	for _, tc := range []struct {
		name, request string
		ids           []string
		want          string
	}{
		{"model replaced, questions kept, state as it was",
			`{"state": {"a" : [1, 2]}, "model":"service-1.0.0","questions":{"x":{"type":"noul","instructions":"?"}, "y" :{"type":"noul","instructions":"¿"}}}`,
			[]string{"y"},
			`{"state":{"a" : [1, 2]},"model":"service-2.0.0","questions":{"y":{"type":"noul","instructions":"¿"}}}`},
		{"model added when absent",
			`{"questions":{"x":{"type":"noul","instructions":"?"}},"state":"s"}`,
			[]string{"x"},
			`{"questions":{"x":{"type":"noul","instructions":"?"}},"state":"s","model":"service-2.0.0"}`},
		{"escaped ids compare unescaped",
			`{"state":"s","questions":{"\u0061":{"type":"noul","instructions":"?"},"b":{"type":"noul","instructions":"?"}}}`,
			[]string{"a"},
			`{"state":"s","questions":{"\u0061":{"type":"noul","instructions":"?"}},"model":"service-2.0.0"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AskAgain([]byte(tc.request), tc.ids, "service-2.0.0")
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %s, %v\nwant %s", got, err, tc.want)
			}
			if _, err := ParseRequest(got); err != nil {
				t.Errorf("the body asked again is not a valid request: %v", err)
			}
		})
	}
	if _, err := AskAgain([]byte(`{"questions":[1]}`), []string{"a"}, "m"); !errors.Is(err, ErrNotSpliceable) {
		t.Errorf("questions not an object: %v, want ErrNotSpliceable", err)
	}
}

func TestReplaceAnswers(t *testing.T) {
	first := `{"model":"service-1.0.0","answers":{"a":{"type":"noul","noul":0.5},"b":{"type":"noul","noul":0.99}},"usage":{"input_tokens":100,"output_tokens":5,"note":"x"}}`
	second := `{"model":"service-2.0.0","answers":{"a":{"type":"noul", "noul":0.97}},"usage":{"input_tokens":40,"output_tokens":2}}`
	got, err := ReplaceAnswers([]byte(first), []byte(second), []string{"a"})
	want := `{"model":"service-1.0.0","answers":{"a":{"type":"noul", "noul":0.97},"b":{"type":"noul","noul":0.99}},"usage":{"input_tokens":140,"output_tokens":7,"note":"x"}}`
	if err != nil || string(got) != want {
		t.Fatalf("got %s, %v\nwant %s", got, err, want)
	}
	// None replaced: the usage is still the sum, the answers the first's.
	got, err = ReplaceAnswers([]byte(first), []byte(second), nil)
	want = `{"model":"service-1.0.0","answers":{"a":{"type":"noul","noul":0.5},"b":{"type":"noul","noul":0.99}},"usage":{"input_tokens":140,"output_tokens":7,"note":"x"}}`
	if err != nil || string(got) != want {
		t.Fatalf("none replaced: got %s, %v\nwant %s", got, err, want)
	}
	// An id the second body does not answer cannot be replaced.
	if _, err := ReplaceAnswers([]byte(first), []byte(second), []string{"b"}); !errors.Is(err, ErrNotSpliceable) {
		t.Errorf("unanswered id: %v, want ErrNotSpliceable", err)
	}
}
