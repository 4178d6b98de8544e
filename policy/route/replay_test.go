package route

import (
	"context"
	"net/http"
	"testing"
)

// A replayed answer is neither queued nor drawn by the audit, whatever its
// route; the same answer unmarked is both. Close waits for the writes, so
// the stream is read after every write that was made.
func TestEnqueueReplay(t *testing.T) {
	r, _, client, _ := queueRouter(t, Queue{Stream: "review"})
	r.audit = 1
	d, resp := humanDecision(r)
	r.Enqueue(context.Background(), d, Meta{RequestID: "replayed", Request: secretRequest, Response: resp, Replay: true})
	r.Enqueue(context.Background(), d, Meta{RequestID: "ordinary", Request: secretRequest, Response: resp})
	r.Close()
	msgs := readStream(t, client, "review")
	if len(msgs) != 1 || msgs[0].Values["request_id"] != "ordinary" || msgs[0].Values["audit"] != "1" {
		t.Errorf("stream %v, want only the ordinary answer, audited", msgs)
	}
	if s := r.QueueStats(); s.Audited != 1 || s.Enqueued != 1 {
		t.Errorf("stats %+v: the replay must not be drawn", s)
	}
}

func TestIsReplay(t *testing.T) {
	for v, want := range map[string]bool{"1": true, "": false, "0": false, "true": false, " 1": true} {
		h := http.Header{}
		if v != "" {
			h.Set(HeaderReplay, v)
		}
		if got := IsReplay(h); got != want {
			t.Errorf("IsReplay(%q) = %v, want %v", v, got, want)
		}
	}
}
