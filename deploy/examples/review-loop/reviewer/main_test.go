package main

import (
	"encoding/json"
	"testing"

	"github.com/systemone/systemone-gateway/simulator"
)

// TestLabelsFor checks what the stand-in reviewer stores: the truth, or with
// -disagree the opposite of a yes/no answer, the truth of a choice only
// where it differs from the answer, and nothing for an item with no
// stored request.
func TestLabelsFor(t *testing.T) {
	body := json.RawMessage(`{"model":"service-1.0.0","state":"The cat sat.","questions":{"b":{"type":"noul","instructions":"Is it a cat?"},"a":{"type":"choice","instructions":"Which?","criteria":{"cat":null,"dog":null,"eel":null}}}}`)
	truth, err := simulator.Truth(body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := labelsFor(item{ID: "1", Request: body}, false)
	if err != nil || got["a"] != truth["a"] || got["b"] != truth["b"] || len(got) != 2 {
		t.Fatalf("labels %v %v, want the truth %v", got, err, truth)
	}

	other := "cat"
	if truth["a"] == "cat" {
		other = "dog"
	}
	for _, tc := range []struct {
		noul, choice string
		want         map[string]any
	}{
		{"0.8", `"` + other + `"`, map[string]any{"b": false, "a": truth["a"]}},
		{"0.2", `"` + truth["a"].(string) + `"`, map[string]any{"b": true}},
	} {
		it := item{ID: "1", Request: body, Questions: []question{
			{ID: "b", Type: "noul", Answer: json.RawMessage(tc.noul)},
			{ID: "a", Type: "choice", Answer: json.RawMessage(tc.choice)},
		}}
		got, err := labelsFor(it, true)
		if err != nil || len(got) != len(tc.want) {
			t.Fatalf("answers %s %s: disagreeing labels %v %v, want %v", tc.noul, tc.choice, got, err, tc.want)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("answers %s %s: label %s = %v, want %v", tc.noul, tc.choice, k, got[k], v)
			}
		}
	}

	if _, err := labelsFor(item{ID: "2"}, false); err == nil {
		t.Error("an item with no stored request was labelled")
	}
}
