package route

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/evaluation"
)

// Meta is what a review entry holds beyond the decision.
type Meta struct {
	// RequestID is the upstream's x-request-id.
	RequestID string
	// Org is the organization id.
	Org string
	// Request and Response are the request body and the (decompressed)
	// response body. They are stored only with Config.IncludeContent, and
	// copied before Enqueue returns.
	Request, Response []byte
}

// Enqueue tuning: a slow or lost Redis costs each queued response at
// most one goroutine for enqueueTimeout, and never more than maxInFlight
// goroutines in all; entries beyond that are dropped, counted and logged.
const (
	enqueueTimeout = time.Second
	maxInFlight    = 64
)

// queue is the review stream.
type queue struct {
	client         StreamWriter
	stream         string
	maxLen         int64
	includeContent bool
	timeout        time.Duration
	slots          chan struct{} // a token per write in flight
	now            func() time.Time
	logger         *zap.Logger

	mu     sync.Mutex // orders wg.Add against Close
	closed bool
	wg     sync.WaitGroup

	enqueued, audited, dropped, failed atomic.Int64
}

func newQueue(cfg Queue, includeContent bool, client StreamWriter, logger *zap.Logger) *queue {
	maxLen := cfg.MaxLen
	if maxLen == 0 {
		maxLen = DefaultMaxLen
	}
	return &queue{
		client:         client,
		stream:         cfg.Stream,
		maxLen:         maxLen,
		includeContent: includeContent,
		timeout:        enqueueTimeout,
		slots:          make(chan struct{}, maxInFlight),
		now:            time.Now,
		logger:         logger,
	}
}

// Enqueue queues a routed 200 response for review when it routes human or
// is drawn by the audit: an entry is written once, with audit "1" when the
// draw picked it, whatever its route. The handler calls it for every routed
// 200 response and lets the Router decide. The draw is made on every call,
// before the route is looked at, so the audited sample is uniform over all
// routed responses and independent of route and confidence.
//
// The write (XADD with MAXLEN ~) runs in the background: Enqueue never
// blocks and never fails the request. ctx's values are kept, its
// cancellation is not: the write outlives the request, bounded by a timeout
// of its own. An entry that cannot be written is logged at warn (ids only,
// never content) and counted in QueueStats. Without a configured queue it
// does nothing.
//
// An entry holds the fields request_id, org, model, route, reason, audit
// ("1" or "0"), questions (a JSON array of
// {"id","type","route","confidence","answer"}: answer is the noul
// probability, the choice key or the score; confidence and answer are null
// when unread), ts (RFC 3339, UTC) and, with include_content, request and
// response.
func (r *Router) Enqueue(ctx context.Context, d Decision, meta Meta) {
	q := r.queue
	if q == nil {
		return
	}
	audit := r.drawAudit()
	if audit {
		q.audited.Add(1)
	}
	if d.Route != RouteHuman && !audit {
		return
	}
	ref := entryRef{requestID: meta.RequestID, org: meta.Org, reason: d.Reason, audit: audit}
	q.mu.Lock()
	select {
	case q.slots <- struct{}{}:
	default:
		q.mu.Unlock()
		q.lost(ref, "review queue saturated, entry dropped", nil, &q.dropped)
		return
	}
	// After Close the write still goes out, untracked: it comes from a
	// request that reached the config after the handler released it (see
	// Close), and the Redis client may well be open still.
	tracked := !q.closed
	if tracked {
		q.wg.Add(1)
	}
	q.mu.Unlock()

	args := &redis.XAddArgs{
		Stream: q.stream,
		MaxLen: q.maxLen,
		Approx: true,
		Values: q.values(d, meta, audit), // built now: the caller may reuse its buffers
	}
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer func() {
			<-q.slots
			if tracked {
				q.wg.Done()
			}
		}()
		ctx, cancel := context.WithTimeout(ctx, q.timeout)
		defer cancel()
		if err := q.client.XAdd(ctx, args).Err(); err != nil {
			q.lost(ref, "review queue write failed, entry lost", err, &q.failed)
			return
		}
		q.enqueued.Add(1)
	}()
}

// Close waits for the writes in flight, each bounded by its timeout. It
// leaves the Redis client open: the caller owns it. Call it from the
// handler's Cleanup, once the config's last request is out (drain.Gate).
// An Enqueue after Close still writes, without Close waiting for it: it
// can only come from a request that reached the config after its release.
func (r *Router) Close() {
	q := r.queue
	if q == nil {
		return
	}
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wg.Wait()
}

// drawAudit reports whether this response is drawn for the audit: true
// with probability Config.Audit. rand.Float64 is in [0, 1), so audit 0
// never draws and audit 1 always does.
func (r *Router) drawAudit() bool {
	if r.audit <= 0 {
		return false
	}
	r.rngMu.Lock()
	v := r.rng.Float64()
	r.rngMu.Unlock()
	return v < r.audit
}

// entryQuestion is one element of an entry's `questions` field.
type entryQuestion struct {
	ID         string   `json:"id"`
	Type       string   `json:"type"`
	Route      string   `json:"route"`
	Confidence *float64 `json:"confidence"`
	// Answer is a float64 (noul, score) or a string (choice); nil is null.
	Answer any `json:"answer"`
}

// values returns the entry's fields, in a fixed order.
func (q *queue) values(d Decision, meta Meta, audit bool) []string {
	qs := make([]entryQuestion, len(d.Questions))
	for i, dq := range d.Questions {
		qs[i] = entryQuestion{ID: dq.ID, Type: dq.Type, Route: dq.Route}
		if dq.HasConfidence {
			qs[i].Confidence = &d.Questions[i].Confidence
		}
		if dq.HasAnswer {
			if dq.Type == evaluation.TypeChoice {
				qs[i].Answer = dq.Choice
			} else {
				qs[i].Answer = dq.Answer
			}
		}
	}
	auditField := "0"
	if audit {
		auditField = "1"
	}
	questions, err := json.Marshal(qs)
	if err != nil { // strings and finite floats always marshal
		questions = []byte("[]")
	}
	v := []string{
		"request_id", meta.RequestID,
		"org", meta.Org,
		"model", d.Model,
		"route", d.Route,
		"reason", d.Reason,
		"audit", auditField,
		"questions", string(questions),
		"ts", q.now().UTC().Format(time.RFC3339Nano),
	}
	if q.includeContent {
		v = append(v, "request", string(meta.Request), "response", string(meta.Response))
	}
	return v
}

// entryRef names an entry in logs, without its content.
type entryRef struct {
	requestID, org, reason string
	audit                  bool
}

// lost counts and logs an entry that did not reach the stream. Each is
// logged, not only the first of a burst: the log is then the only record of
// a response that needed review.
func (q *queue) lost(ref entryRef, msg string, err error, counter *atomic.Int64) {
	n := counter.Add(1)
	if ce := q.logger.Check(zap.WarnLevel, msg); ce != nil {
		fields := []zap.Field{
			zap.String("stream", q.stream),
			zap.String("request_id", ref.requestID),
			zap.String("org", ref.org),
			zap.String("route_reason", ref.reason),
			zap.Bool("audit", ref.audit),
			zap.Int64("total", n),
		}
		if err != nil {
			fields = append(fields, zap.Error(err))
		}
		ce.Write(fields...)
	}
}
