package payload

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/policy/guardrails"
	"github.com/systemone/systemone-gateway/simulator"
)

// TestPayloads: every payload has the advertised shape, passes the
// gateway's inspection, gets a 200 from the simulated upstream (budgets
// off) and a clean verdict from its guardrails service.
func TestPayloads(t *testing.T) {
	zero := int64(0)
	sim, err := simulator.New(simulator.Handler{
		RequestsPerMinute: &zero, TokensPerSecond: &zero, MaxTokens: &zero, MaxQuestionTokens: &zero,
	})
	if err != nil {
		t.Fatal(err)
	}
	all := All()
	if len(all) != 6 {
		t.Fatalf("%d payloads, want 6", len(all))
	}
	for _, p := range all {
		t.Run(p.Name, func(t *testing.T) {
			again, err := Get(p.Name)
			if err != nil || !bytes.Equal(again.Body, p.Body) {
				t.Fatalf("Get(%q) does not give the same bytes again (err %v)", p.Name, err)
			}
			req, err := evaluation.ParseRequest(p.Body)
			if err != nil {
				t.Fatalf("ParseRequest: %v", err)
			}
			if len(req.Questions) != p.Questions {
				t.Errorf("%d questions, want %d", len(req.Questions), p.Questions)
			}
			var state string
			if err := json.Unmarshal(req.State, &state); err != nil || len(state) != p.StateBytes {
				t.Errorf("state of %d bytes (%v), want %d", len(state), err, p.StateBytes)
			}
			if p.Size != Small && (p.StateBytes > shapeOf(p.Size).stateBytes || p.StateBytes < shapeOf(p.Size).stateBytes-4) {
				t.Errorf("state of %d bytes, want about %d", p.StateBytes, shapeOf(p.Size).stateBytes)
			}
			if p.Language == Chinese && !strings.ContainsRune(state, '客') {
				t.Error("Chinese payload holds no Chinese text")
			}

			rec := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/v1/systemone", bytes.NewReader(p.Body))
			r.Header.Set("Authorization", "Bearer bench")
			sim.ServeHTTP(rec, r)
			if rec.Code != http.StatusOK {
				t.Fatalf("simulator answered %d: %s", rec.Code, rec.Body)
			}

			msgs, err := guardrails.Messages(req.State)
			if err != nil {
				t.Fatal(err)
			}
			gbody, _ := json.Marshal(map[string]any{"model": "Service-Guardrails-Text", "messages": msgs})
			rec = httptest.NewRecorder()
			r = httptest.NewRequest(http.MethodPost, "/v1/guardrails", bytes.NewReader(gbody))
			r.Header.Set("Authorization", "Bearer bench")
			sim.ServeHTTP(rec, r)
			var verdict struct {
				Overall string `json:"overall_risk_level"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &verdict); err != nil || verdict.Overall != "无风险" {
				t.Errorf("guardrails verdict %s (%v), want 无风险", rec.Body, err)
			}
		})
	}
	if _, err := Get("1m-en"); err == nil {
		t.Error("Get accepted an unknown size")
	}
	if _, err := Get("small-fr"); err == nil {
		t.Error("Get accepted an unknown language")
	}
}

func shapeOf(size string) shape {
	for _, s := range shapes {
		if s.size == size {
			return s
		}
	}
	return shape{}
}
