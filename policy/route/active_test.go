package route

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
)

func activeRouter(t *testing.T) *Router {
	t.Helper()
	r, _, _, _ := queueRouter(t, Queue{Stream: "review"})
	r.active = newActiveDraw(&ActiveAudit{MaxShare: 0.2, Floor: 0.02, From: ptr(0.6)})
	return r
}

// The active audit's probability follows the response's highest
// confidence: the share when any question is at or above from, the floor
// otherwise, and the floor when nothing could be read.
func TestActiveAuditProbability(t *testing.T) {
	r := activeRouter(t)
	for _, tc := range []struct {
		name string
		d    Decision
		want float64
	}{
		// noul confidence is |2p-1|: 0.9 and 0.5.
		{"high noul, low choice", decideBody(r, queueQuestions, body("service-1.0.0", choice("a,b", "0.3"), noul("中文", "0.95")), Signal{}), 0.2},
		{"all low", decideBody(r, queueQuestions, body("service-1.0.0", choice("a,b", "0.3"), noul("中文", "0.75")), Signal{}), 0.02},
		{"exactly from", decideBody(r, queueQuestions, body("service-1.0.0", choice("a,b", "0.6"), noul("中文", "0.5")), Signal{}), 0.2},
		{"unreadable", decideBody(r, queueQuestions, nil, Signal{}), 0.02},
	} {
		if got := r.active.probability(tc.d); got != tc.want {
			t.Errorf("%s: probability %v, want %v", tc.name, got, tc.want)
		}
	}
	// Defaults: floor a tenth of the share, from 0.5.
	if a := newActiveDraw(&ActiveAudit{MaxShare: 0.3}); a.floor != 0.03 || a.from != 0.5 {
		t.Errorf("defaults %+v, want floor 0.03 from 0.5", *a)
	}
}

// Drawn shares match the probabilities: n Bernoulli(p) draws each, 5
// standard deviations.
func TestActiveAuditDrawShares(t *testing.T) {
	r := activeRouter(t)
	r.rng = rand.New(rand.NewPCG(3, 4))
	high := decideBody(r, queueQuestions, body("service-1.0.0", choice("a,b", "0.9"), noul("中文", "0.5")), Signal{})
	low := decideBody(r, queueQuestions, body("service-1.0.0", choice("a,b", "0.1"), noul("中文", "0.5")), Signal{})
	const n = 20000
	for _, tc := range []struct {
		d         Decision
		p, lo, hi float64
	}{{high, 0.2, 0.186, 0.214}, {low, 0.02, 0.0150, 0.0250}} {
		drawn := 0
		for range n {
			ok, p := r.drawAudit(tc.d)
			if p != tc.p {
				t.Fatalf("probability %v, want %v", p, tc.p)
			}
			if ok {
				drawn++
			}
		}
		if share := float64(drawn) / n; share < tc.lo || share > tc.hi {
			t.Errorf("p %v: %.4f drawn", tc.p, share)
		}
	}
}

// Every entry records the probability it was drawn with, and under the
// active audit its floor and from; the uniform audit writes its fraction.
func TestEntryAuditProbability(t *testing.T) {
	r, _, client, _ := queueRouter(t, Queue{Stream: "review"})
	r.active = newActiveDraw(&ActiveAudit{MaxShare: 1, Floor: 0.125, From: ptr(0.6)})
	high := decideBody(r, queueQuestions, body("service-1.0.0", choice("a,b", "0.7"), noul("中文", "0.5")), Signal{})
	r.Enqueue(context.Background(), high, Meta{RequestID: "active-high"}) // p 1: always drawn
	low, _ := humanDecision(r)                                            // choice 0.3, noul 0.8; the noul lowered below
	low.Questions[1].Confidence = 0.1
	r.Enqueue(context.Background(), low, Meta{RequestID: "active-low"}) // human: queued, drawn or not
	r.Close()

	u, _, uclient, _ := queueRouter(t, Queue{Stream: "review"})
	u.audit = 1
	u.Enqueue(context.Background(), high, Meta{RequestID: "uniform"})
	u.Close()

	got := map[string]map[string]any{}
	for _, m := range append(readStream(t, client, "review"), readStream(t, uclient, "review")...) {
		got[m.Values["request_id"].(string)] = m.Values
	}
	for id, want := range map[string]map[string]any{
		"active-high": {"audit": "1", "audit_p": "1", "audit_floor": "0.125", "audit_from": "0.6"},
		"active-low":  {"audit_p": "0.125", "audit_floor": "0.125", "audit_from": "0.6"},
		"uniform":     {"audit": "1", "audit_p": "1", "audit_floor": nil, "audit_from": nil},
	} {
		for k, v := range want {
			if got[id][k] != v {
				t.Errorf("%s: %s = %v, want %v (entry %v)", id, k, got[id][k], v, got[id])
			}
		}
	}
}

func TestActiveAuditConfig(t *testing.T) {
	q := &Queue{Stream: "s"}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Queue: q, ActiveAudit: &ActiveAudit{MaxShare: 0.05}}, ""},
		{Config{Queue: q, ActiveAudit: &ActiveAudit{MaxShare: 0.05, Floor: 0.05, From: ptr(0.0)}}, ""},
		{Config{Queue: q, Audit: 0.1, ActiveAudit: &ActiveAudit{MaxShare: 0.05}}, "exclude each other"},
		{Config{ActiveAudit: &ActiveAudit{MaxShare: 0.05}}, "needs a queue"},
		{Config{Queue: q, ActiveAudit: &ActiveAudit{MaxShare: 0.05, Floor: 0.06}}, "floor 0.06 is not in (0, 0.05]"},
		{Config{Queue: q, ActiveAudit: &ActiveAudit{MaxShare: 0.05, From: ptr(-1.0)}}, "from -1 is outside 0..1"},
	} {
		err := tc.cfg.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
