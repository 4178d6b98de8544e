package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/internal/wait"
)

// post sends an evaluation of state through the gateway, routed human
// (every confidence low), and returns its request id and the answer body,
// without waiting for its review entry.
func (s *stack) post(t *testing.T, state string) (string, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/systemone", strings.NewReader(evalBody(state)))
	req.Header.Set("Authorization", "Bearer review-test-key")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Simulator-Confidence", `{"n":0.55,"c":0.3,"s":0.3}`)
	resp, body := do(t, req)
	if resp.StatusCode != 200 || resp.Header.Get("X-Route") != "human" {
		t.Fatalf("evaluation: %d route %q: %s", resp.StatusCode, resp.Header.Get("X-Route"), body)
	}
	return resp.Header.Get("X-Request-Id"), body
}

// Sequential requests with include_content are listed by /items in the
// order they were answered, each with its own content: the queue's one
// writer sends the entries in routed order, content first.
func TestReviewItemsInRoutedOrder(t *testing.T) {
	s := newStack(t, stackOptions{includeContent: true})
	const n = 40
	var sent []string
	for i := range n {
		id, _ := s.post(t, "state "+strconv.Itoa(i))
		sent = append(sent, id)
	}
	wait.Until(t, fmt.Sprintf("the stream's %d entries", n), func() bool {
		l, err := s.rdb.XLen(context.Background(), stream).Result()
		return err == nil && l == n
	})
	var p page
	s.get(t, "/review/items?limit="+strconv.Itoa(n), &p)
	if len(p.Items) != n {
		t.Fatalf("%d items, want %d", len(p.Items), n)
	}
	for i, it := range p.Items {
		var req struct {
			State string `json:"state"`
		}
		if it.RequestID != sent[i] || json.Unmarshal(it.Request, &req) != nil || req.State != "state "+strconv.Itoa(i) {
			t.Fatalf("item %d: request id %s (sent %s), request %s", i, it.RequestID, sent[i], it.Request)
		}
	}
}

// An entry Redis does not take counts in
// systemone_review_entries_lost_total{reason="failed"}, read from the
// gateway's metrics endpoint; the request itself is answered.
func TestReviewEntriesLostMetric(t *testing.T) {
	s := newStack(t, stackOptions{})
	const failed = `reason="failed"`
	before := s.metricSum(t, "systemone_review_entries_lost_total", failed)
	s.redis.Stop()
	s.post(t, "lost while Redis is away")
	wait.Within(t, wait.Bound, fmt.Sprintf("systemone_review_entries_lost_total{%s} at %v", failed, before+1), func() error {
		if got := s.metricSum(t, "systemone_review_entries_lost_total", failed); got != before+1 {
			return fmt.Errorf("it stays at %v", got)
		}
		return nil
	})
}
