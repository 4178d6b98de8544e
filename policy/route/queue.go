package route

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
// the value "1" (record.HeaderReplay, which `replay` sends).
const HeaderReplay = record.HeaderReplay

// IsReplay reports whether a request's headers mark it as replayed:
// HeaderReplay is "1" (around white space).
func IsReplay(h http.Header) bool {
	return strings.TrimSpace(h.Get(HeaderReplay)) == "1"
}

// The queue writer's bounds: at most queueCapacity entries wait for the
// writer (an entry beyond that is dropped, counted and logged: Enqueue
// never blocks a response), and each batch of writes is bounded by
// writeTimeout, so a slow or lost Redis costs waiting entries, never
// requests.
const (
	queueCapacity = 64
	writeTimeout  = time.Second
)

// queue is the review stream and its one writer.
type queue struct {
	client         StreamWriter
	stream         string
	maxLen         int64
	includeContent bool
	// maxContent bounds the content of one entry (Config.MaxContent).
	maxContent int64
	timeout    time.Duration // of one batch
	now        func() time.Time
	logger     *zap.Logger

	// waiting holds the entries for the writer, in the order routed.
	// mu orders sends against Close closing it.
	waiting chan pending
	mu      sync.RWMutex
	closed  bool
	done    chan struct{} // closed when the writer has returned

	enqueued, audited, dropped, failed atomic.Int64
}

// pending is an entry built and waiting for the writer: its fields, and
// with include_content the fields of its content entry.
type pending struct {
	ref     entryRef
	entry   record.Entry
	content []string
}

func newQueue(cfg Queue, includeContent bool, maxContent int64, client StreamWriter, capacity int, logger *zap.Logger) *queue {
	maxLen := cfg.MaxLen
	if maxLen == 0 {
		maxLen = DefaultMaxLen
	}
	if maxContent == 0 {
		maxContent = DefaultMaxContent
	}
	q := &queue{
		client:         client,
		stream:         cfg.Stream,
		maxLen:         maxLen,
		includeContent: includeContent,
		maxContent:     maxContent,
		timeout:        writeTimeout,
		now:            time.Now,
		logger:         logger,
		waiting:        make(chan pending, capacity),
		done:           make(chan struct{}),
	}
	go q.run()
	return q
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
// The entry is built now (the caller may reuse its buffers) and handed to
// the queue's one writer, which writes the entries in the order Enqueue
// was called (see run): Enqueue never blocks and never fails the request.
// An entry that finds the writer's queue full is dropped; one that Redis
// does not take (an error, or its batch's timeout) fails. Either is logged
// at warn (ids only, never content), counted in QueueStats and in
// systemone_review_entries_lost_total (LostEntriesCollector). Without a
// configured queue it does nothing.
//
// The entry's fields are record.Entry's. With include_content the bodies
// go to a content entry of their own (see record.ContentStream), written
// first, whose id the entry's `content` field names; a body that does not
// fit in max_content is not stored and `content_too_large` names it
// ("request", "response" or both).
func (r *Router) Enqueue(_ context.Context, d Decision, meta Meta) {
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
	e, content := r.entry(d, meta, audit, p)
	w := pending{ref: entryRef{requestID: meta.RequestID, org: meta.Org, reason: d.Reason, audit: audit}, entry: e, content: content}
	q.mu.RLock()
	if q.closed {
		q.mu.RUnlock()
		// After Close the entry still goes out, alone and untracked: it
		// comes from a request that reached the config after the handler
		// released it (see Close), and the Redis client may well be open
		// still.
		go q.write([]pending{w})
		return
	}
	select {
	case q.waiting <- w:
		q.mu.RUnlock()
	default:
		q.mu.RUnlock()
		q.lost(w.ref, lostDropped, nil, &q.dropped)
	}
}

// run is the queue's writer: it takes every entry waiting, writes them as
// one batch (write), and goes back for more, until Close closes waiting
// and the last batch is written. One writer, batches in turn, each in the
// order routed: the stream lists entries in the order their answers were
// routed.
func (q *queue) run() {
	defer close(q.done)
	batch := make([]pending, 0, cap(q.waiting))
	for first := range q.waiting {
		batch = append(batch[:0], first)
	more:
		for len(batch) < cap(batch) {
			select {
			case w, ok := <-q.waiting:
				if !ok {
					break more
				}
				batch = append(batch, w)
			default:
				break more
			}
		}
		q.write(batch)
		clear(batch) // let the bodies go
	}
}

// write writes a batch within the queue's timeout: the content entries of
// the batch in one pipeline, for their ids, then the entries, in order, in
// another. An entry whose content was not written is not written either
// (it would name content that is not there): it fails, and the entries
// after it still go.
func (q *queue) write(batch []pending) {
	ctx, cancel := context.WithTimeout(context.Background(), q.timeout)
	defer cancel()
	contentIDs := make([]*redis.StringCmd, len(batch))
	if q.includeContent {
		pipe := q.client.Pipeline()
		for i := range batch {
			if len(batch[i].content) > 0 {
				contentIDs[i] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: record.ContentStream(q.stream), MaxLen: q.maxLen, Approx: true, Values: batch[i].content})
			}
		}
		if pipe.Len() > 0 {
			_, _ = pipe.Exec(ctx) // each command holds its own error
		}
	}
	pipe := q.client.Pipeline()
	written := make([]*redis.StringCmd, len(batch))
	for i := range batch {
		w := &batch[i]
		if c := contentIDs[i]; c != nil {
			id, err := c.Result()
			if err != nil {
				q.lost(w.ref, lostFailed, err, &q.failed)
				continue
			}
			w.entry.Content = id
		}
		written[i] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: q.stream, MaxLen: q.maxLen, Approx: true, Values: w.entry.Values()})
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(ctx)
	}
	for i, c := range written {
		switch {
		case c == nil:
		case c.Err() != nil:
			q.lost(batch[i].ref, lostFailed, c.Err(), &q.failed)
		default:
			q.enqueued.Add(1)
		}
	}
}

// Close writes the entries waiting, each batch bounded by its timeout, and
// stops the writer. It leaves the Redis client open: the caller owns it.
// Call it from the handler's Cleanup, once the config's last request is
// out (drain.Gate). An Enqueue after Close still writes, without Close
// waiting for it: it can only come from a request that reached the config
// after its release.
func (r *Router) Close() {
	if r.stopAlarms != nil {
		r.stopAlarms()
	}
	q := r.queue
	if q == nil {
		return
	}
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.waiting)
	}
	q.mu.Unlock()
	<-q.done
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
		e.Questions[i] = record.Question{ID: dq.ID, Type: dq.Type, Route: dq.Route, Reason: dq.Reason}
		if dq.HasConfidence {
			c := dq.Confidence
			e.Questions[i].Confidence = &c
		}
		if dq.HasAnswer {
			e.Questions[i].Answer = answerJSON(dq.Type, dq.Answer, dq.Choice)
		}
		if esc := dq.Escalated; esc != nil {
			e.Questions[i].Reason = esc.FirstReason // the reason it was asked again for
			e.Questions[i].Escalated = &record.Escalated{Model: esc.Model, Confidence: esc.Confidence, Route: esc.Route}
			if esc.HasAnswer {
				e.Questions[i].Escalated.Answer = answerJSON(dq.Type, esc.Answer, esc.Choice)
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

// answerJSON is a model's answer as an entry holds it: the choice key
// for a choice question, else the number.
func answerJSON(typ string, number float64, choice string) json.RawMessage {
	var answer any = number
	if typ == evaluation.TypeChoice {
		answer = choice
	}
	raw, _ := json.Marshal(answer) // strings and finite floats always marshal
	return raw
}

// entryRef names an entry in logs, without its content.
type entryRef struct {
	requestID, org, reason string
	audit                  bool
}

// Why an entry was lost: the values of the reason label of
// systemone_review_entries_lost_total.
const (
	// lostDropped: the writer's queue was full; the entry was never sent.
	lostDropped = "dropped"
	// lostFailed: Redis did not take the entry (an error or a timeout).
	lostFailed = "failed"
)

var lostMessages = map[string]string{
	lostDropped: "review queue saturated, entry dropped",
	lostFailed:  "review queue write failed, entry lost",
}

// lost counts and logs an entry that did not reach the stream. Each is
// logged, not only the first of a burst: the log is then the only record of
// a response that needed review.
func (q *queue) lost(ref entryRef, reason string, err error, counter *atomic.Int64) {
	n := counter.Add(1)
	lostEntries().WithLabelValues(reason).Inc()
	if ce := q.logger.Check(zap.WarnLevel, lostMessages[reason]); ce != nil {
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

// lostEntries is the process's count of lost review entries: created
// once, registered on every config's registry (LostEntriesCollector), so
// that it keeps counting across reloads.
var lostEntries = sync.OnceValue(func() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "systemone", Name: "review_entries_lost_total",
		Help: "Review entries that never reached the review stream, by reason: dropped (the queue writer was full) or failed (Redis did not take the write).",
	}, []string{"reason"})
})

// LostEntriesCollector returns the collector of
// systemone_review_entries_lost_total{reason}: review entries that never
// reached the stream, "dropped" or "failed" (see Enqueue). Register it on
// every config's registry; registering it twice on one registry gives
// prometheus.AlreadyRegisteredError.
func LostEntriesCollector() prometheus.Collector { return lostEntries() }
