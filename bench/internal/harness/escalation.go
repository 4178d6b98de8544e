package harness

import (
	"context"
	"fmt"
	"net/http"

	"github.com/systemone/systemone-gateway/evaluation"
)

// The versions and thresholds of the gateway's route blocks: the payloads'
// alias answers as FirstVersion, which every gateway configuration pins at
// PinThresholds; Escalated and EscalationIdle escalate it to
// SecondVersion.
const (
	FirstVersion  = "service-1.0.0"
	SecondVersion = "service-2.0.0"
)

// PinThresholds are the pin's thresholds per question type.
var PinThresholds = map[string]float64{evaluation.TypeNoul: 0.8, evaluation.TypeChoice: 0.6, evaluation.TypeScore: 0.5}

// Escalation is what Escalated does with one payload: the questions it
// asks again, of how many.
type Escalation struct {
	Asked     []string
	Questions int
}

func (e Escalation) String() string {
	return fmt.Sprintf("%d of %d questions asked again", len(e.Asked), e.Questions)
}

// EscalatedRequests returns Escalated's requests for body, whose upstream
// answer is first, each expecting the answer Escalated gives: first with
// the answers of the questions the pin routes human (below PinThresholds)
// replaced by SecondVersion's answers to the second call, the request with
// those questions only, asking SecondVersion, as the gateway makes it
// (evaluation.AskAgain); `usage` the sum of both. SecondVersion's answer
// is the upstream's own (Reference: registered with the stub, asked of
// the simulator directly). A payload with no such question expects first,
// unescalated.
func (s *Stack) EscalatedRequests(ctx context.Context, d *Driver, body, first []byte) ([]Request, Escalation, error) {
	esc, err := escalatedQuestions(body, first)
	if err != nil {
		return nil, esc, err
	}
	want := first
	if len(esc.Asked) > 0 {
		again, err := evaluation.AskAgain(body, esc.Asked, SecondVersion)
		if err != nil {
			return nil, esc, err
		}
		second, err := s.Reference(ctx, d, again)
		if err != nil {
			return nil, esc, fmt.Errorf("the second call: %w", err)
		}
		if want, err = evaluation.ReplaceAnswers(first, second, esc.Asked); err != nil {
			return nil, esc, err
		}
	}
	reqs := s.Requests(Escalated, body, want)
	check := escalatedCheck(len(esc.Asked) > 0)
	for i := range reqs {
		reqs[i].Check = check
	}
	return reqs, esc, nil
}

// escalatedQuestions reads which questions of body the pin routes human:
// those whose answer in first is below the threshold of its type.
func escalatedQuestions(body, first []byte) (Escalation, error) {
	req, err := evaluation.ParseRequest(body)
	if err != nil {
		return Escalation{}, err
	}
	resp, err := evaluation.ParseResponse(first)
	if err != nil {
		return Escalation{}, err
	}
	esc := Escalation{Questions: len(req.Questions)}
	for _, q := range req.Questions {
		a, found := resp.Find(q.ID)
		if !found {
			return esc, fmt.Errorf("the upstream's answer has no answer to %q", q.ID)
		}
		reading, ok := a.Read(q.Type)
		if !ok {
			return esc, fmt.Errorf("the upstream's answer to %q does not read", q.ID)
		}
		if reading.Confidence < PinThresholds[q.Type] {
			esc.Asked = append(esc.Asked, q.ID)
		}
	}
	return esc, nil
}

// escalatedCheck is Escalated's header check: L's, and the route the
// escalation gives: X-Route-Escalated naming the second version when a
// question was asked again (then every question routes auto, the second
// version taking each it was asked), none when none was.
func escalatedCheck(asked bool) func(http.Header) error {
	limits := HeaderCheck(Escalated)
	return func(h http.Header) error {
		if err := limits(h); err != nil {
			return err
		}
		got := h.Get("X-Route-Escalated")
		switch {
		case asked && (got == "" || h.Get("X-Route") != "auto" || h.Get("X-Route-Reason") != "escalated"):
			return fmt.Errorf("X-Route-Escalated %q, X-Route %q, X-Route-Reason %q: want the questions escalated, every one auto",
				got, h.Get("X-Route"), h.Get("X-Route-Reason"))
		case !asked && got != "":
			return fmt.Errorf("X-Route-Escalated %q on a payload with no question to ask again", got)
		}
		return nil
	}
}
