package evaluation

import "testing"

// TestRead holds the gateway's reading of an answer: the confidence it
// routes by, and the answer only beside a readable confidence.
func TestRead(t *testing.T) {
	cases := []struct {
		name string
		a    Answer
		typ  string
		want Reading
		ok   bool
	}{
		{"noul: |2p-1| to the decimal", Answer{Type: TypeNoul, Noul: 0.95, HasNoul: true}, TypeNoul,
			Reading{Confidence: 0.9, Answer: 0.95, HasAnswer: true}, true},
		{"choice", Answer{Type: TypeChoice, Confidence: 0.7, HasConfidence: true, Choice: "b", HasChoice: true}, TypeChoice,
			Reading{Confidence: 0.7, Choice: "b", HasAnswer: true}, true},
		{"score without its score", Answer{Type: TypeScore, Confidence: 0.6, HasConfidence: true}, TypeScore,
			Reading{Confidence: 0.6}, true},
		{"another type", Answer{Type: TypeScore, Confidence: 0.6, HasConfidence: true, Score: 2, HasScore: true}, TypeChoice,
			Reading{}, false},
		{"confidence out of range keeps the answer out", Answer{Type: TypeChoice, Confidence: 1.5, HasConfidence: true, Choice: "a", HasChoice: true}, TypeChoice,
			Reading{}, false},
		{"noul without its number", Answer{Type: TypeNoul}, TypeNoul, Reading{}, false},
	}
	for _, c := range cases {
		got, ok := c.a.Read(c.typ)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: Read = %+v, %v; want %+v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
