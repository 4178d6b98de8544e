// Package replay re-asks the requests behind people's labels to another
// model version, so that the version can be calibrated before it serves
// traffic: a label is about the content, not the model that answered.
//
// Run reads the review API's `/labels`, fetches the Item of each labelled
// entry, and sends its stored request (kept with the route block's
// `include_content`) to the evaluation endpoint once, its `model` set to the
// candidate version and marked `X-Systemone-Replay: 1`, so that a gateway in
// between routes it as any other request but neither queues nor audits it.
// For each labelled question of the entry it writes the original `/labels`
// line with the new answer: `model` the response's, `confidence` and
// `answer` read as the gateway reads them, `agree` recomputed against the
// same `label`, `route` "replay" and `request_id` the new response's
// x-request-id; every other field as it was. An entry that fails is kept
// in the sample: its lines are disagreements at confidence 1, route
// "replay_failed" (output.go). `calibrate` reads the output.
//
// The package also registers the `replay` subcommand.
package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/review/client"
	"github.com/systemone/systemone-gateway/internal/review/record"
)

// Defaults of the `replay` command.
const (
	// DefaultConcurrency is how many entries are replayed at once.
	DefaultConcurrency = 4
	// DefaultPrice is the price, in yuan per million input tokens, of the
	// cost in the summary: the evaluation service's.
	DefaultPrice = 0.042
	// MaxAttempts is how often one entry's request is sent: once, and
	// retried twice on 429, 529, another 5xx or a transport error.
	MaxAttempts = 3
	// DefaultMaxWait bounds one wait before a retry, whatever retry-after
	// asks for.
	DefaultMaxWait = time.Minute
	// maxResponse bounds the answer read: evaluation answers are small.
	maxResponse = 16 << 20
	// maxLine bounds one `/labels` line, as calibrate does.
	maxLine = 1 << 20
)

// HeaderReplay marks the replayed requests.
const HeaderReplay = record.HeaderReplay

// Options are a replay's parameters.
type Options struct {
	// Review is the base URL of a `systemone_review` mount; user info in it
	// is sent as basic auth, never in a URL. Required.
	Review string
	// Upstream is the base URL of the evaluation API (a gateway or the
	// service); requests go to <Upstream>/v1/systemone. Required.
	Upstream string
	// Model is the version the requests ask for. Required.
	Model string
	// APIKey is sent as `Authorization: Bearer`. Required; the command takes
	// it from SYSTEMONE_API_KEY only.
	APIKey string
	// Concurrency is how many entries are replayed at once; default
	// DefaultConcurrency.
	Concurrency int
	// Price is the yuan per million input tokens of the summary's cost;
	// default DefaultPrice (a zero Price is taken as unset).
	Price float64
	// MaxWait bounds one wait before a retry; default DefaultMaxWait.
	MaxWait time.Duration
	// Client sends every request; default one with http.DefaultTransport's
	// settings and a bound on the wait for headers. Whatever its
	// CheckRedirect, no redirect is followed.
	Client *http.Client
	// Sleep waits before a retry; default a timer that ctx cancels. Tests
	// inject one.
	Sleep func(ctx context.Context, d time.Duration) error
	// Log receives one line per entry that failed (never content, never
	// the key). Default: discarded.
	Log io.Writer
	// Limit is the most labelled entries taken from `/labels`, the first
	// ones in its order (entries without a stored request among them count
	// as skipped); 0 takes them all.
	Limit int
	// DryRun sends nothing to the upstream: each entry that would be
	// replayed is written as one line, `entry <id> questions <n> tokens
	// <estimate>`, its tokens estimated from the stored request as the
	// gateway estimates them, and the summary counts those estimates.
	DryRun bool
	// Progress, when set, is called with the counts so far after each
	// entry is written, from one goroutine.
	Progress func(Summary)
	// Escalate, when set, is the first version of an `escalate` block to
	// calibrate, Model its second: of each entry answered by Escalate,
	// only the labelled questions its answer routed human for low
	// confidence are asked of Model (one call per entry, those questions
	// only), and their lines are written as an escalated question's
	// second answer's (stage 2, escalated_from Escalate). Entries with no
	// such question are not asked (nor counted). "" replays every
	// labelled question.
	Escalate string
}

// Summary counts a replay's entries.
type Summary struct {
	// Replayed entries were answered 200 and written.
	Replayed int
	// Skipped entries hold no stored request (stored without
	// include_content, or trimmed from the stream).
	Skipped int
	// Failed entries got no 200 within MaxAttempts, or could not be read
	// or sent; their lines are written as disagreements (output.go).
	Failed int
	// Tokens sums the responses' usage.input_tokens.
	Tokens int64
	// Cost is Tokens at Price, in yuan.
	Cost float64
}

// String is the command's summary line: `replayed <n> skipped <n> failed <n>
// tokens <n> cost <yuan>`, the cost with at most 6 decimals.
func (s Summary) String() string {
	return fmt.Sprintf("replayed %d skipped %d failed %d tokens %d cost %s",
		s.Replayed, s.Skipped, s.Failed, s.Tokens, formatYuan(s.Cost))
}

// formatYuan writes an amount with at most 6 decimals.
func formatYuan(yuan float64) string {
	return strconv.FormatFloat(math.Round(yuan*1e6)/1e6, 'f', -1, 64)
}

func (o *Options) setDefaults() error {
	var missing []string
	for _, f := range []struct{ name, v string }{{"--review", o.Review}, {"--upstream", o.Upstream}, {"--model", o.Model}, {"SYSTEMONE_API_KEY", o.APIKey}} {
		if strings.TrimSpace(f.v) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s (the API key comes from the environment only)", strings.Join(missing, ", "))
	}
	if o.Limit < 0 {
		return fmt.Errorf("--limit %d is negative", o.Limit)
	}
	if o.Escalate != "" && strings.TrimSpace(o.Escalate) == strings.TrimSpace(o.Model) {
		return fmt.Errorf("--escalate %s is --model: --escalate names the first version, whose unsure answers --model is asked again", o.Escalate)
	}
	if o.Concurrency < 0 {
		return fmt.Errorf("--concurrency %d is negative", o.Concurrency)
	}
	if o.Price < 0 || math.IsNaN(o.Price) || math.IsInf(o.Price, 0) {
		return fmt.Errorf("--price %v is not a price", o.Price)
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Price == 0 {
		o.Price = DefaultPrice
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.Client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = 5 * time.Minute // an evaluation may take a while
		o.Client = &http.Client{Transport: t}
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// labelled is one entry's `/labels` lines.
type labelled struct {
	entry string
	// lines are the labelled questions' lines, replayed; carried the
	// lines of questions not labelled yet or of a passed entry, written
	// under the new version as they are (output.go).
	lines   []line
	carried []line
	// tooLarge: the entry's lines exceed maxEntryBytes; they were not
	// kept, and the entry fails.
	tooLarge bool
}

// line is one `/labels` line: its bytes, and what replay reads of it.
type line struct {
	raw      []byte
	question string
	typ      string
	label    json.RawMessage
	pass     bool // a line of a passed entry (carried)
	// model, stage and route, for --escalate's choice of lines.
	model, route string
	stage        int
}

// job is one entry on its way through Run: read, replayed by a worker,
// written.
type job struct {
	entry labelled
	done  chan result // gets the entry's one result
}

// Run replays the labelled entries of opts.Review to opts.Model and writes
// the new `/labels` lines to out, entries in the order `/labels` names
// them. It streams `/labels`: an entry is replayed as soon as its lines
// are read, and at most opts.Concurrency entries wait to be written, so
// its memory does not grow with the number of lines. It fails at once
// when `/labels` cannot be opened; a line that is not a `/labels` line,
// or out of the export's entry order, stops the reading there (the entries
// before it are replayed and written) and is the error returned. An entry
// that fails is counted and logged, and the others go on. No redirect is
// followed, from the review API or the upstream: a 3xx is a failure, so
// that credentials go nowhere but the origins named.
func Run(ctx context.Context, opts Options, out io.Writer) (Summary, error) {
	if err := opts.setDefaults(); err != nil {
		return Summary{}, err
	}
	review, err := client.New(opts.Review, opts.Client)
	if err != nil {
		return Summary{}, errors.New("--review is not an http(s) URL")
	}
	upstream, err := url.Parse(strings.TrimRight(opts.Upstream, "/") + "/v1/systemone")
	if err != nil || (upstream.Scheme != "http" && upstream.Scheme != "https") {
		return Summary{}, errors.New("--upstream is not an http(s) URL")
	}
	ctx, cancel := context.WithCancel(ctx) // a failed write stops the reading too
	defer cancel()
	labels, err := review.Open(ctx, client.NDJSON, "labels")
	if err != nil {
		return Summary{}, err
	}
	defer labels.Close()
	r := &replayer{opts: opts, review: review, client: client.NoRedirect(opts.Client), endpoint: upstream.String(), extra: escalationFields(opts.Escalate)}
	// inOrder holds the entries read and not yet written, in /labels
	// order; its bound is what keeps memory flat.
	inOrder := make(chan *job, opts.Concurrency)
	work := make(chan *job)
	var wg sync.WaitGroup
	for range opts.Concurrency {
		wg.Go(func() {
			for j := range work {
				j.done <- r.replay(ctx, j.entry)
			}
		})
	}
	var readErr error // written before inOrder closes
	go func() {
		defer close(inOrder)
		defer close(work)
		taken := 0
		readErr = readLabels(labels, "GET "+review.Redacted("labels"), func(e labelled) bool {
			if opts.Escalate != "" {
				if e = escalationCandidates(e, opts.Escalate); len(e.lines) == 0 && len(e.carried) == 0 && !e.tooLarge {
					return true // nothing of the first version's to ask again
				}
			} else {
				e = firstStage(e)
			}
			j := &job{entry: e, done: make(chan result, 1)}
			select {
			case inOrder <- j:
			case <-ctx.Done():
				return false
			}
			if len(e.lines) == 0 && !e.tooLarge {
				j.done <- result{carriedOnly: true} // nothing to ask: its lines are carried
				return true
			}
			select {
			case work <- j:
				taken++
				return opts.Limit == 0 || taken < opts.Limit
			case <-ctx.Done():
				j.done <- result{err: ctx.Err()}
				return false
			}
		})
	}()

	var sum Summary
	w := &output{out: out, log: opts.Log, requested: opts.Model, extra: r.extra}
	for j := range inOrder {
		res := <-j.done
		switch {
		case res.carriedOnly:
			if !opts.DryRun {
				w.hold(j.entry, false)
			}
		case res.skipped:
			sum.Skipped++
		case res.none:
			// The stored entry holds no question of the first version's
			// to ask again: not part of the escalation's sample.
		case res.err != nil:
			sum.Failed++
			fmt.Fprintf(opts.Log, "entry %s: %v\n", j.entry.entry, res.err)
			if !opts.DryRun {
				if res.asked != nil {
					w.hold(*res.asked, true)
				} else {
					w.hold(j.entry, true)
				}
			}
		default:
			sum.Replayed++
			sum.Tokens += res.tokens
			w.answered(res.model)
			w.write(res.lines)
			if !opts.DryRun {
				w.hold(j.entry, false) // its carried lines, if any
			}
		}
		if w.err != nil {
			cancel() // nowhere to write: stop asking
		}
		if opts.Progress != nil {
			opts.Progress(sum)
		}
	}
	wg.Wait()
	w.flush(w.requested)
	sum.Cost = float64(sum.Tokens) * opts.Price / 1e6
	if w.err != nil {
		return sum, fmt.Errorf("writing the output: %w", w.err)
	}
	return sum, readErr
}

// result is one entry's outcome.
type result struct {
	// carriedOnly: the entry has no labelled question, only carried
	// lines; it is not replayed.
	carriedOnly bool
	skipped     bool
	// none: with --escalate, the entry's stored questions hold none its
	// first version routed human for low confidence.
	none bool
	err  error
	// asked, with --escalate, is the entry with the lines of the
	// questions asked again only, once known: a failure writes those.
	asked  *labelled
	tokens int64
	// model is the concrete version that answered; empty in a dry run.
	model string
	lines [][]byte
}

type replayer struct {
	opts   Options
	review *client.Client
	// client is opts.Client, following no redirect.
	client   *http.Client
	endpoint string
	// extra are the fields every line written gets beside the new
	// answer's: --escalate's stage and escalated_from; nil without.
	extra *lineFields
}

// replay sends one entry's stored request and rewrites its lines.
func (r *replayer) replay(ctx context.Context, e labelled) result {
	if e.tooLarge {
		return result{err: fmt.Errorf("its /labels lines exceed %d bytes", maxEntryBytes)}
	}
	item, found, err := storedItem(ctx, r.review, e.entry)
	switch {
	case err != nil:
		return result{err: err}
	case !found:
		return result{skipped: true}
	}
	var body []byte
	var asked *labelled
	if r.opts.Escalate != "" {
		if e = item.escalated(e); len(e.lines) == 0 {
			return result{none: true}
		}
		asked = &e
		body, err = askAgain(item.request, e, r.opts.Model)
	} else {
		body, err = setModel(item.request, r.opts.Model)
	}
	if err != nil {
		return result{err: err, asked: asked}
	}
	if r.opts.DryRun {
		return estimate(e, body)
	}
	text, requestID, err := r.send(ctx, body)
	if err != nil {
		return result{err: err, asked: asked}
	}
	resp, err := evaluation.ParseResponse(text)
	if err != nil || resp.Model == "" {
		return result{err: errors.New("the 200 answer is not an evaluation response"), asked: asked}
	}

	res := result{tokens: resp.InputTokens, model: resp.Model, lines: make([][]byte, len(e.lines))}
	model, _ := json.Marshal(resp.Model)
	rid, _ := json.Marshal(requestID)
	for i, l := range e.lines {
		// The gateway's own reading of the answer (confidence |2p-1| for
		// noul, the answer only when its confidence is readable).
		var q evaluation.Reading
		readable := false
		if a, found := resp.Find(l.question); found {
			q, readable = a.Read(l.typ)
		}
		confidence, answer := json.RawMessage("null"), json.RawMessage("null")
		if readable {
			confidence, _ = json.Marshal(q.Confidence)
		}
		if q.HasAnswer {
			if l.typ == evaluation.TypeChoice {
				answer, _ = json.Marshal(q.Choice)
			} else {
				answer, _ = json.Marshal(q.Answer)
			}
		}
		agree := json.RawMessage("false")
		if record.Agree(l.typ, l.label, answer) {
			agree = json.RawMessage("true")
		}
		out, err := r.extra.rewrite(l.raw, rewritten, map[string]json.RawMessage{
			"model": model, "confidence": confidence, "answer": answer, "agree": agree,
			"route": json.RawMessage(`"replay"`), "request_id": rid,
		})
		if err != nil {
			return result{err: fmt.Errorf("rewriting a line: %v", err), asked: asked}
		}
		res.lines[i] = out
	}
	return res
}

// rewritten are the fields replay sets on a `/labels` line, in the order a
// line lacking them gets them.
var rewritten = []string{"request_id", "model", "confidence", "answer", "agree", "route"}

// send posts body, retrying 429, 529, other 5xx and transport errors up to
// MaxAttempts in all, and returns the 200's decompressed body and its
// x-request-id.
func (r *replayer) send(ctx context.Context, body []byte) ([]byte, string, error) {
	var last error
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.endpoint, bytes.NewReader(body))
		if err != nil {
			return nil, "", err
		}
		req.Header.Set("Authorization", "Bearer "+r.opts.APIKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(HeaderReplay, "1")
		resp, err := r.client.Do(req)
		var wait time.Duration
		switch {
		case err != nil:
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err // its message repeats the URL
			}
			last = fmt.Errorf("POST %s: %v", r.endpoint, err)
		default:
			text, readErr := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusOK && readErr == nil:
				return text, resp.Header.Get("X-Request-Id"), nil
			case resp.StatusCode == http.StatusOK:
				last = fmt.Errorf("reading the answer: %v", readErr)
			case resp.StatusCode >= 300 && resp.StatusCode < 400:
				return nil, "", fmt.Errorf("answered %s: replay follows no redirect, so that the API key goes only to --upstream; give the URL that answers", resp.Status)
			case !retryable(resp.StatusCode):
				return nil, "", fmt.Errorf("answered %s: %s", resp.Status, client.Printable(text))
			default:
				last = fmt.Errorf("answered %s: %s", resp.Status, client.Printable(text))
				wait = retryAfter(resp.Header, time.Now())
			}
		}
		if attempt == MaxAttempts || ctx.Err() != nil {
			return nil, "", fmt.Errorf("%v (after %d attempts)", last, attempt)
		}
		if wait == 0 {
			wait = time.Duration(500<<(attempt-1)) * time.Millisecond // 0.5s, then 1s, as the official clients back off
		}
		if err := r.opts.Sleep(ctx, min(wait, r.opts.MaxWait)); err != nil {
			return nil, "", err
		}
	}
}

// retryable: overloaded, rate limited, or a server error.
func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// retryAfter reads retry-after as seconds or an HTTP date; 0 when absent
// or unreadable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 && s < 1e9 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
