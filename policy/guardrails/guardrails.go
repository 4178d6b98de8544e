// Package guardrails checks the state of evaluation requests against the
// guardrails service (POST /v1/guardrails) and decides, by the `guardrails`
// block's policy, whether a request is forwarded, forwarded for human
// review, or answered 400 guardrails_blocked / 503 guardrails_unavailable.
//
// It knows nothing of the gateway's handler: Check takes the raw JSON of
// `state` and returns a Verdict, which can write the X-Guardrails-* headers
// and the blocked answer's body.
package guardrails

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ErrTimeout is wrapped by a Verdict's Err when the service did not answer
// within the configured timeout.
var ErrTimeout = errors.New("guardrails: timed out")

// maxAnswer bounds the service's answer that is read; a verdict is a few
// hundred bytes.
const maxAnswer = 1 << 20

// transport is shared by every Checker, so that connections to the service
// are reused across requests and survive config reloads. Timeouts come from
// each check's context.
var transport = &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	ForceAttemptHTTP2:     true,
	MaxIdleConns:          256,
	MaxIdleConnsPerHost:   64, // the default of 2 churns connections under load
	IdleConnTimeout:       90 * time.Second,
	TLSHandshakeTimeout:   10 * time.Second,
	ExpectContinueTimeout: time.Second,
}

// Checker checks message lists against the guardrails service. It is safe
// for concurrent use.
type Checker struct {
	cfg      Config // defaults applied
	endpoint string
	// endpointURL and header are the parts of every call that never
	// change: the URL parsed once, the header built once (each call
	// clones it).
	endpointURL *url.URL
	header      http.Header
	client      *http.Client
	cache       *verdictCache // nil when the cache is off
	logger      *zap.Logger

	// flights lets identical concurrent checks share one call to the
	// service (see call).
	flights flights
	// failing is whether the service's last answer was a failure, so that
	// only changes are logged, not every failed request.
	failing atomic.Bool
}

// New returns a Checker for cfg, after applying its defaults and validating
// it. With cfg.Cache set, verdicts are cached in Redis when rdb is not nil
// (shared by every gateway instance; keys are keyPrefix + "guardrails:" +
// a hash) behind an in-process front of the verdicts this instance used
// last, else in process only (at most 10,000 verdicts and 32 MiB either
// way). rdb is the handler's
// Redis client and keyPrefix the gateway's key prefix. A nil logger logs
// nothing.
func New(cfg Config, rdb RedisClient, keyPrefix string, logger *zap.Logger) (*Checker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	c := &Checker{
		cfg:      cfg,
		endpoint: strings.TrimRight(cfg.URL, "/") + "/v1/guardrails",
		client: &http.Client{
			Transport: transport,
			// A redirect would resend the messages somewhere else; treat it
			// as the failure it is.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		logger: logger,
	}
	if c.endpointURL, err = url.Parse(c.endpoint); err != nil {
		return nil, fmt.Errorf("guardrails: %v", err)
	}
	c.header = http.Header{
		"Authorization": {"Bearer " + cfg.APIKey},
		"Content-Type":  {"application/json"},
		"Accept":        {"application/json"},
	}
	if cfg.Cache != 0 {
		c.cache = newVerdictCache(rdb, keyPrefix+"guardrails:", time.Duration(cfg.Cache), logger, time.Now)
	}
	return c, nil
}

// Parallel reports whether the check runs alongside the upstream call
// (mode parallel) rather than before it.
func (c *Checker) Parallel() bool { return c.cfg.Mode == ModeParallel }

// Check checks an evaluation request's state (the raw JSON of `state`) and
// decides on it. It returns within the configured timeout, or sooner when
// ctx ends (unless other identical checks wait for the call this one
// leads: it then returns when that call ends, within its timeout); it never
// fails otherwise: a failed check is a Verdict with Action unchecked or
// unavailable, as on_error says. A call that gets no usable answer within
// the timeout counts as the service failing (logged when it starts and
// when it ends); one cut short because its caller went away does not.
//
// State with no text in it (only empty or blank strings) passes with risk
// none without asking the service.
func (c *Checker) Check(ctx context.Context, state []byte) Verdict {
	start := time.Now()
	v := c.check(ctx, state)
	v.Elapsed = time.Since(start)
	return v
}

func (c *Checker) check(ctx context.Context, state []byte) Verdict {
	msgs, err := Messages(state)
	if err != nil {
		return c.failed(fmt.Errorf("guardrails: %w", err))
	}
	if !slices.ContainsFunc(msgs, func(m Message) bool { return strings.TrimSpace(m.Content) != "" }) {
		return c.decide(assessment{Risk: RiskNone})
	}
	timeout := time.Duration(c.cfg.Timeout)
	// The check's own deadline passing is the service not answering in
	// time (errCheckTimedOut); the caller's context ending is not.
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadlineCause(ctx, deadline, errCheckTimedOut)
	defer cancel()

	key := cacheKey(c.cfg.Model, msgs)
	if c.cache != nil {
		// A lookup cut short because the client went away is a miss, and
		// never a Redis failure (the store's health rule).
		if a, ok := c.cache.get(ctx, key); ok {
			v := c.decide(a)
			v.Cached = true
			return v
		}
	}
	a, err := c.call(ctx, deadline, key, msgs)
	switch {
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return c.failed(fmt.Errorf("%w: no answer within %v", ErrTimeout, timeout))
	case ctx.Err() != nil:
		return c.failed(fmt.Errorf("guardrails: %w", ctx.Err()))
	case err != nil:
		return c.failed(err)
	}
	return c.decide(a)
}

// decide applies the policy to what the service said.
func (c *Checker) decide(a assessment) Verdict {
	v := Verdict{
		Risk:          a.Risk,
		Categories:    slices.Clone(a.Categories), // a may be shared by the cache
		ServiceAction: a.ServiceAction,
		SuggestAnswer: a.SuggestAnswer,
	}
	blockedCategory := slices.ContainsFunc(v.Categories, func(name string) bool {
		return slices.Contains(c.cfg.BlockCategory, name)
	})
	switch {
	case blockedCategory || slices.Contains(c.cfg.Block, v.Risk):
		v.Action = ActionBlock
	case slices.Contains(c.cfg.Review, v.Risk):
		v.Action = ActionReview
	default:
		v.Action = ActionPass
	}
	return v
}

// failed is the verdict of a check that did not get a usable answer.
func (c *Checker) failed(err error) Verdict {
	v := Verdict{Risk: RiskUnknown, Err: err}
	if c.cfg.OnError == OnErrorAllow {
		v.Action = ActionUnchecked
	} else {
		v.Action, v.Unavailable = ActionUnavailable, true
	}
	return v
}

// serviceRequest is the body of POST /v1/guardrails.
type serviceRequest struct {
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
}

// ask sends msgs to the service and reads its verdict.
func (c *Checker) ask(ctx context.Context, msgs []Message) (assessment, error) {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false) // the service should read the text as sent
	if err := enc.Encode(serviceRequest{Model: c.cfg.Model, Messages: msgs}); err != nil {
		return assessment{}, fmt.Errorf("guardrails: encoding request: %v", err)
	}
	// As http.NewRequestWithContext makes it, with the URL parsed and the
	// header built when the checker was made.
	req := (&http.Request{
		Method:        http.MethodPost,
		URL:           c.endpointURL,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        c.header.Clone(),
		Body:          io.NopCloser(&body),
		ContentLength: int64(body.Len()),
		Host:          c.endpointURL.Host,
	}).WithContext(ctx)
	snapshot := body.Bytes()
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(snapshot)), nil }

	resp, err := c.client.Do(req)
	if err != nil {
		return assessment{}, c.transportError(ctx, "request failed", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Drain a little so that the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode == http.StatusTooManyRequests {
			return assessment{}, errors.New("guardrails: service answered 429 (rate limited)")
		}
		return assessment{}, fmt.Errorf("guardrails: service answered %d", resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return assessment{}, c.transportError(ctx, "reading answer", err)
	}
	if len(data) > maxAnswer {
		return assessment{}, fmt.Errorf("guardrails: answer larger than %d bytes", maxAnswer)
	}
	return parseAnswer(data)
}

// transportError describes a failed exchange without the URL (which the
// operator knows) and tells a timeout from the rest.
func (c *Checker) transportError(ctx context.Context, what string, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: no answer within %v", ErrTimeout, time.Duration(c.cfg.Timeout))
	}
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	return fmt.Errorf("guardrails: %s: %v", what, err)
}

// noteHealth logs when the service starts failing and when it is back; each
// failure itself only at debug level.
func (c *Checker) noteHealth(err error) {
	if err == nil {
		if c.failing.CompareAndSwap(true, false) {
			c.logger.Info("guardrails service answering again")
		}
		return
	}
	if c.failing.CompareAndSwap(false, true) {
		c.logger.Warn("guardrails service failing", zap.Error(err), zap.String("on_error", c.cfg.OnError))
	} else if ce := c.logger.Check(zapcore.DebugLevel, "guardrails check failed"); ce != nil {
		ce.Write(zap.Error(err))
	}
}

// cacheKey is the hex SHA-256 of the model and the messages, each string
// length-prefixed so that different lists cannot hash the same input.
func cacheKey(model string, msgs []Message) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	write := func(s string) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		_, _ = io.WriteString(h, s)
	}
	write(model)
	for _, m := range msgs {
		write(m.Role)
		write(m.Content)
	}
	return hex.EncodeToString(h.Sum(nil))
}
