package route

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/review/record"
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
	// Replay marks a request sent by `systemone-gateway replay` (it carries
	// HeaderReplay): routed as any other, but neither queued nor audited,
	// since its labels exist already and it is no sample of the traffic.
	Replay bool
}

// HeaderReplay is the request header that marks a replayed request, with
// the value "1".
const HeaderReplay = "X-Systemone-Replay"

// IsReplay reports whether a request's headers mark it as replayed:
// HeaderReplay is "1" (around white space).
func IsReplay(h http.Header) bool {
	return strings.TrimSpace(h.Get(HeaderReplay)) == "1"
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
	// maxContent bounds the content of one entry (Config.MaxContent).
	maxContent int64
	timeout    time.Duration
	slots      chan struct{} // a token per write in flight
	now        func() time.Time
	logger     *zap.Logger

	mu     sync.Mutex // orders wg.Add against Close
	closed bool
	wg     sync.WaitGroup

	enqueued, audited, dropped, failed atomic.Int64
}

func newQueue(cfg Queue, includeContent bool, maxContent int64, client StreamWriter, logger *zap.Logger) *queue {
	maxLen := cfg.MaxLen
	if maxLen == 0 {
		maxLen = DefaultMaxLen
	}
	if maxContent == 0 {
		maxContent = DefaultMaxContent
	}
	return &queue{
		client:         client,
		stream:         cfg.Stream,
		maxLen:         maxLen,
		includeContent: includeContent,
		maxContent:     maxContent,
		timeout:        enqueueTimeout,
		slots:          make(chan struct{}, maxInFlight),
		now:            time.Now,
		logger:         logger,
	}
}

// Enqueue queues a routed 200 response for review when it routes human or
// is drawn by the audit, unless meta.Replay (not even drawn): an entry is
// written once, with audit "1" when the
// draw picked it, whatever its route. The handler calls it for every routed
// 200 response and lets the Router decide. The draw is made on every call,
// before the route is looked at, so the audited sample is uniform over all
// routed responses and independent of route and confidence; with `audit
// active` its probability depends on the confidences only (never the
// route), and is written in the entry.
//
// The write (XADD with MAXLEN ~) runs in the background: Enqueue never
// blocks and never fails the request. ctx's values are kept, its
// cancellation is not: the write outlives the request, bounded by a timeout
// of its own. An entry that cannot be written is logged at warn (ids only,
// never content) and counted in QueueStats. Without a configured queue it
// does nothing.
//
// An entry holds the fields request_id, org, model, route, reason, audit
// ("1" or "0"), audit_p (the probability the audit drew this response
// with, a decimal string: the audit fraction, the active audit's share or
// floor; none without an audit), with `audit active` audit_floor and
// audit_from (its floor and from), questions (a JSON array of
// {"id","type","route","confidence","answer"}: answer is the noul
// probability, the choice key or the score; confidence and answer are null
// when unread), ts (RFC 3339, UTC). With include_content the bodies go to a
// content entry of their
// own (see record.ContentStream), written first, whose id the entry's `content`
// field names; a body that does not fit in max_content is not stored and
// `content_too_large` names it ("request", "response" or both, comma
// separated).
func (r *Router) Enqueue(ctx context.Context, d Decision, meta Meta) {
	q := r.queue
	if q == nil || meta.Replay {
		return // a replay is neither queued nor drawn: the audit stays a sample of the traffic
	}
	audit, p := r.drawAudit(d)
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

	// Built now: the caller may reuse its buffers.
	e, content := r.entry(d, meta, audit, p)
	args := &redis.XAddArgs{Stream: q.stream, MaxLen: q.maxLen, Approx: true, Values: e.Values()}
	var contentArgs *redis.XAddArgs
	if len(content) > 0 {
		contentArgs = &redis.XAddArgs{Stream: record.ContentStream(q.stream), MaxLen: q.maxLen, Approx: true, Values: content}
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
		if contentArgs != nil {
			// The content first, so that an entry never points at content
			// not yet written; content whose entry then fails is trimmed
			// with its stream.
			id, err := q.client.XAdd(ctx, contentArgs).Result()
			if err != nil {
				q.lost(ref, "review queue write failed, entry lost", err, &q.failed)
				return
			}
			args.Values = append(args.Values.([]string), "content", id)
		}
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
	if r.alarms != nil {
		r.alarms.close()
	}
	q := r.queue
	if q == nil {
		return
	}
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wg.Wait()
}

// drawAudit reports whether this response is drawn for the audit, and the
// probability it was drawn with: Config.Audit for the uniform audit, the
// active audit's probability for d's highest confidence with `audit
// active`. rand.Float64 is in [0, 1), so a probability of 0 never draws
// and 1 always does.
func (r *Router) drawAudit(d Decision) (bool, float64) {
	p := r.audit
	if r.active != nil {
		p = r.active.probability(d)
	}
	if p <= 0 {
		return false, 0
	}
	r.rngMu.Lock()
	v := r.rng.Float64()
	r.rngMu.Unlock()
	return v < p, p
}

// activeDraw is ActiveAudit with its defaults filled in.
type activeDraw struct {
	share, floor, from float64
}

func newActiveDraw(a *ActiveAudit) *activeDraw {
	if a == nil {
		return nil
	}
	return &activeDraw{share: a.MaxShare, floor: a.floor(), from: a.from()}
}

// probability is the share for a response whose highest confidence is at
// or above from, else the floor (also when no confidence was read). The
// highest, so that every question at or above from, whatever the other
// questions of its response, is drawn with the share (see ActiveAudit).
func (a *activeDraw) probability(d Decision) float64 {
	for _, q := range d.Questions {
		if q.HasConfidence && q.Confidence >= a.from {
			return a.share
		}
	}
	return a.floor
}

// entry builds the review entry of d, and with include_content the
// content entry of its bodies (nil when no body fits in maxContent, or
// without include_content). p is the probability the audit drew with,
// written on every entry, drawn or not, when an audit is configured.
func (r *Router) entry(d Decision, meta Meta, audit bool, p float64) (record.Entry, []string) {
	q := r.queue
	e := record.Entry{
		RequestID: meta.RequestID, Org: meta.Org, Model: d.Model, Route: d.Route, Reason: d.Reason,
		Audit: audit, TS: q.now().UTC().Format(time.RFC3339Nano),
		Questions: make([]record.Question, len(d.Questions)),
	}
	for i, dq := range d.Questions {
		e.Questions[i] = record.Question{ID: dq.ID, Type: dq.Type, Route: dq.Route}
		if dq.HasConfidence {
			c := dq.Confidence
			e.Questions[i].Confidence = &c
		}
		if dq.HasAnswer {
			var answer any = dq.Answer
			if dq.Type == evaluation.TypeChoice {
				answer = dq.Choice
			}
			if raw, err := json.Marshal(answer); err == nil { // strings and finite floats always marshal
				e.Questions[i].Answer = raw
			}
		}
	}
	if r.audit > 0 || r.active != nil {
		e.AuditP = record.Probability(p)
	}
	if a := r.active; a != nil {
		// What `calibrate --method weighted` needs beyond p: the least
		// probability any answer could be drawn with, and the confidence
		// from which every answer is drawn with the share.
		e.AuditFloor, e.AuditFrom = record.Probability(a.floor), record.Probability(a.from)
	}
	if !q.includeContent {
		return e, nil
	}
	// The request first: it is what a reviewer reads and replay re-sends;
	// the response's answers are in `questions` already.
	var content record.Content
	room := q.maxContent
	for _, body := range []struct {
		name string
		b    []byte
		into **string
	}{{"request", meta.Request, &content.Request}, {"response", meta.Response, &content.Response}} {
		if int64(len(body.b)) > room {
			e.ContentTooLarge = append(e.ContentTooLarge, body.name)
			continue
		}
		room -= int64(len(body.b))
		text := string(body.b) // a copy: the caller may reuse its buffers
		*body.into = &text
	}
	return e, content.Values()
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
