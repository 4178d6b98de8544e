package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batching, after envoyproxy/ratelimit's REDIS_PIPELINE_WINDOW and
// REDIS_PIPELINE_LIMIT, one step further: the calls of concurrent requests
// share one write and one read to Redis, and one call of batchScript
// (per slot on a cluster), each still its own atomic step with its own
// answer.
const (
	// pipelineLimit is the most admissions one pipeline carries: one
	// script call on a single server (see scriptItems).
	pipelineLimit = 128
	// flushLimit is the most settlements or holds one pipeline of a flush
	// carries.
	flushLimit = 1024
	// maxInflight is the most admission pipelines in flight to one node:
	// more than one keeps a leader that is slow to be scheduled on a busy
	// machine from holding up every admission behind it; more than two
	// measured no faster and made more, smaller calls (BENCHMARKS.md: 4
	// sent 0.36 calls per request at 32 clients, 2 sent 0.21, for as much
	// throughput and a lower p50 at 30% of the load).
	maxInflight = 2
	// maxInflightSettle is the most pipelines in flight for a settlement to
	// open one more: a settlement opens a pipeline only for an idle node,
	// and otherwise rides the next one (an admission's, or the one a
	// finishing leader hands on, at most a round trip later), as a budgeted
	// request's second item should: its request has its answer and waits
	// only to release it.
	maxInflightSettle = 1
)

// scriptCall is one item of batchScript for a node batcher, and its
// answer.
type scriptCall struct {
	node *redis.Client
	kind callKind
	keys []string
	args []any

	res any
	err error
	// state is guarded by the batcher's mutex.
	state callState
	// wake carries one signal: the answer is in (state sent), or the
	// call is to lead the next pipeline (state leading).
	wake chan struct{}
}

type callState uint8

const (
	queued callState = iota
	leading
	sent
)

// nodeBatcher sends the admissions for one Redis node. Its window is the
// pipelines in flight: while maxInflight are, the admissions that arrive
// (up to pipelineLimit) gather for the next. A lone admission finds a free
// slot and goes at once, so batching adds no latency at low load; under
// load it adds at most one round trip's wait, and saves a write, a read,
// two wake-ups and a script call per admission on both sides. Where envoyproxy/ratelimit
// flushes its write buffer on a timer (REDIS_PIPELINE_WINDOW), this waits
// for no timer: the window closes when a pipeline's answer comes back.
//
// No goroutine of its own: the caller that finds the node idle sends, and
// when its pipeline is answered hands the lead to the first admission that
// waited (which has to be woken anyway), so no request pays for another's
// answer.
type nodeBatcher struct {
	s *Store
	// health is the node's (see health.go).
	health health
	mu     sync.Mutex
	// inflight counts the leaders: pipelines in flight or about to be.
	// Below maxInflightSettle, pending is empty; below maxInflight it
	// holds settlements only, waiting for the next pipeline.
	inflight int
	pending  []*scriptCall
}

// batcher returns the batcher of node, by address: a cluster client may
// replace a node's client, the node stays the same.
func (s *Store) batcher(node *redis.Client) *nodeBatcher {
	addr := node.Options().Addr
	if b, ok := s.batchers.Load(addr); ok {
		return b.(*nodeBatcher)
	}
	nb := &nodeBatcher{s: s}
	nb.health.addr = addr
	b, loaded := s.batchers.LoadOrStore(addr, nb)
	if !loaded {
		s.health.nodes.Add(1)
	}
	return b.(*nodeBatcher)
}

// do runs c in the node's next pipeline and waits for its answer, at most
// timeout in the queue (its pipeline is bounded by store_timeout again),
// and no longer than ctx lasts. A call whose wait ends before it was
// written is taken off the queue: it never runs. One that was written may
// have run; its answer is dropped. The timeout is a timer of the call's
// own, started only when it has to wait, not a context derived from ctx:
// that would register with the request's context and leave it on every
// admission, which the profile showed costing more than the timer.
func (b *nodeBatcher) do(ctx context.Context, c *scriptCall, timeout time.Duration) (any, error) {
	c.wake = make(chan struct{}, 1)
	slots := maxInflight
	if c.kind == kindSettle {
		slots = maxInflightSettle
	}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	if b.inflight < slots {
		b.inflight++
		// Leading already: another leader finishing its pipeline must
		// neither take c into its own (c would return before its answer
		// is in) nor hand c a second lead.
		c.state = leading
		b.mu.Unlock()
		b.lead(c)
		return c.res, c.err
	}
	b.mu.Unlock()
	wait := time.NewTimer(timeout)
	defer wait.Stop()
	var cause error
	select {
	case <-c.wake:
	case <-ctx.Done():
		cause = ctx.Err()
	case <-wait.C:
		cause = context.DeadlineExceeded
	}
	if cause != nil {
		b.mu.Lock()
		st := c.state
		if st != sent {
			if i := slices.Index(b.pending, c); i >= 0 {
				b.pending = slices.Delete(b.pending, i, i+1)
			}
		}
		b.mu.Unlock()
		if st == leading {
			go b.lead(nil) // it was handed the lead: pass it on
		}
		if st != sent {
			// Taken off the queue: it never ran (notSent says so).
			return nil, fmt.Errorf("%w: %w", errNotSent, cause)
		}
		return nil, cause
	}
	b.mu.Lock()
	st := c.state
	b.mu.Unlock()
	if st == leading {
		b.lead(c) // its answer comes with this pipeline
	}
	return c.res, c.err
}

// lead sends self (nil for none) and the calls waiting, up to
// pipelineLimit, in one pipeline, then hands the lead
// to the first call still waiting and not already handed one (with several
// pipelines in flight, two leaders may finish before the first woken
// takes the queue), or gives up its slot.
func (b *nodeBatcher) lead(self *scriptCall) {
	b.mu.Lock()
	// Its own call and those waiting, up to pipelineLimit; a call handed
	// the lead by another leader stays, for its own pipeline.
	var batch []*scriptCall
	rest := b.pending[:0]
	for _, c := range b.pending {
		if len(batch) < pipelineLimit && (c == self || c.state == queued) {
			c.state = sent
			batch = append(batch, c)
		} else {
			rest = append(rest, c)
		}
	}
	clear(b.pending[len(rest):])
	b.pending = rest
	b.mu.Unlock()
	if len(batch) > 0 {
		b.s.pipeline(batch[len(batch)-1].node, batch)
		for _, c := range batch {
			c.wake <- struct{}{}
		}
	}
	b.mu.Lock()
	// The first call not yet handed a lead by another pipeline's leader.
	i := slices.IndexFunc(b.pending, func(c *scriptCall) bool { return c.state == queued })
	if i < 0 {
		b.inflight--
		b.mu.Unlock()
		return
	}
	next := b.pending[i]
	next.state = leading
	b.mu.Unlock()
	next.wake <- struct{}{}
}

// pipeline sends calls to node in one pipeline (one write, one read), as
// calls of batchScript of at most scriptItems items each, and stores each
// call's answer in it. On a Redis Cluster a script call holds the items
// of one slot only (see scriptGroups). A script call refused with
// NOSCRIPT did not run: those go once more as EVAL, which loads the
// script. Nothing else is sent twice here: a call whose answer was lost
// may have run, and an item debits (the settlement queue sends a
// settlement again, with its id; see resend.go). The pipeline is bounded by store_timeout
// from now: a caller gone does not cancel the others' admissions.
func (s *Store) pipeline(node *redis.Client, calls []*scriptCall) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	groups := s.scriptGroups(calls)
	keys := make([][]string, len(groups))
	args := make([][]any, len(groups))
	cmds := make([]*redis.Cmd, len(groups))
	pipe := node.Pipeline()
	for i, g := range groups {
		keys[i], args[i] = batchArgs(g)
		cmds[i] = batchScript.EvalSha(ctx, pipe, keys[i], args[i]...)
	}
	_, _ = pipe.Exec(ctx)
	var again []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe := node.Pipeline()
		for _, i := range again {
			cmds[i] = batchScript.Eval(ctx, pipe, keys[i], args[i]...)
		}
		_, _ = pipe.Exec(ctx)
	}
	moved := false
	for i, g := range groups {
		answer(g, cmds[i])
		if err := cmds[i].Err(); err != nil {
			if class, _ := classify(err); class == "moved" {
				moved = true
			}
		}
	}
	if moved {
		// A slot moved (resharding, failover): those scripts did not run.
		// Refresh the slot map now rather than at the next periodic reload.
		s.reloadSlots(ctx)
	}
}

// scriptItems is the most items one call of batchScript carries: enough
// to pay Redis's per-call cost once for many, few enough that the call
// keeps Redis from its other clients no longer than a short pipeline of
// single scripts would.
const scriptItems = 128

// scriptGroups splits calls, in order, into the items of batchScript's
// calls: at most scriptItems each, and on a Redis Cluster those of one
// slot each (every key of one organization shares its slot; see keyOrg),
// since a cluster refuses a script whose keys span slots. A node serves
// many slots: its pipeline then carries one script call per slot.
func (s *Store) scriptGroups(calls []*scriptCall) [][]*scriptCall {
	if !s.cluster {
		return slices.Collect(slices.Chunk(calls, scriptItems))
	}
	var groups [][]*scriptCall
	open := make(map[uint16]int) // slot -> its group being filled
	for _, c := range calls {
		slot := keySlot(c.keys[0])
		i, ok := open[slot]
		if !ok || len(groups[i]) == scriptItems {
			i = len(groups)
			open[slot] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], c)
	}
	return groups
}

// batchArgs are the KEYS and ARGV of one call of batchScript that carries
// calls.
func batchArgs(calls []*scriptCall) ([]string, []any) {
	nk, na := 0, 1
	for _, c := range calls {
		nk += len(c.keys)
		na += 3 + len(c.args)
	}
	keys := make([]string, 0, nk)
	args := make([]any, 0, na)
	args = append(args, len(calls))
	for _, c := range calls {
		keys = append(keys, c.keys...)
		args = append(args, string(c.kind), len(c.keys), len(c.args))
		args = append(args, c.args...)
	}
	return keys, args
}

// answer stores in each of calls its answer from cmd, a call of
// batchScript that carried them: the call's error for each when the call
// failed as a whole (none of them ran, or, with the answer lost, any may
// have), else each item's own reply or error reply.
func answer(calls []*scriptCall, cmd *redis.Cmd) {
	res, err := cmd.Result()
	if err != nil {
		for _, c := range calls {
			c.err = err
		}
		return
	}
	replies, ok := res.([]any)
	if !ok || len(replies) != len(calls) {
		err := fmt.Errorf("%w: %T of %d items", errBadReply, res, len(calls))
		for _, c := range calls {
			c.err = err
		}
		return
	}
	for i, c := range calls {
		if rerr, ok := replies[i].(redis.Error); ok {
			c.err = rerr
			continue
		}
		c.res = replies[i]
	}
}

// keySlot is the Redis Cluster slot of key: CRC16 (XMODEM) of its hash
// tag (the part between the first { and the next }, when not empty) or
// of the whole key, modulo 16384, as the Redis Cluster specification
// defines it.
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// errNotSent is a script taken off its node's queue before it was written.
var errNotSent = errors.New("redis script not sent")
