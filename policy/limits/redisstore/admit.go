package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/redispool"
	"github.com/systemone/systemone-gateway/policy/limits/store"
)

// run sends one item of kind (a body of batchScript) to the node that
// owns keys[0], in that node's next script call (see nodeBatcher), with
// the other items waiting for that node, and waits for its answer: at most
// store_timeout for a pipeline to take it, and store_timeout for that
// pipeline. It is never sent twice. While that node is lost it fails at
// once (errLost). Its result counts towards the node's health.
func (s *Store) run(ctx context.Context, kind callKind, keys []string, args ...any) (any, error) {
	node, b, err := s.nodeFor(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	res, err := b.do(ctx, &scriptCall{node: node, kind: kind, keys: keys, args: args}, s.timeout)
	s.observe(ctx, &b.health, keys[0], err)
	return res, err
}

// nodeFor returns the node that owns key and its batcher. Its error says
// the script was not sent (notSent): no node could be found (a cluster
// whose slot map cannot be loaded, which counts towards the slot map's
// health), or the node is lost (errLost).
func (s *Store) nodeFor(ctx context.Context, key string) (*redis.Client, *nodeBatcher, error) {
	if s.health.slotMap.lost.Load() {
		return nil, nil, errNodeLost
	}
	node, err := s.node(ctx, key)
	if err != nil {
		if _, cluster := s.client.(*redis.ClusterClient); cluster {
			s.observe(ctx, &s.health.slotMap, key, err)
		}
		return nil, nil, fmt.Errorf("%w: %w", errNotSent, err)
	}
	b := s.batcher(node)
	if b.health.lost.Load() {
		return nil, nil, errNodeLost
	}
	return node, b, nil
}

// upFor reports whether the node that serves org's keys is counted up,
// as far as this instance knows without a round trip.
func (s *Store) upFor(ctx context.Context, org string) bool {
	key := s.bucketKey(org)
	_, _, err := s.nodeFor(ctx, key)
	return !errors.Is(err, errLost)
}

// node returns the client of the node that owns key (redispool.ForKey). A
// cluster's lookup may load the slot map, which store_timeout bounds; a
// single server's is the client itself, with no deadline to pay for on
// every admission.
func (s *Store) node(ctx context.Context, key string) (*redis.Client, error) {
	if _, cluster := s.client.(*redis.ClusterClient); cluster {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	return redispool.ForKey(ctx, s.client, key)
}

// Admit implements store.Store: c against Redis, on the server's clock;
// localHold is the hold this instance knows of (microseconds left), which
// Redis may not have yet. While the node that serves org is lost it fails
// at once (errLost).
func (s *Store) Admit(ctx context.Context, org string, c store.Check, localHold int64, _ time.Time) (store.Outcome, error) {
	call := s.admitCall(org, c, localHold)
	res, err := s.run(ctx, call.kind, call.keys, call.args...)
	var o store.Outcome
	if err == nil {
		if o, err = parseOutcome(res); err != nil {
			s.scriptFailed("script", err)
		}
	}
	return o, err
}

// admitCall is the script item of an admission: exactBody's for one
// without a budget, admitBody's for one with.
func (s *Store) admitCall(org string, c store.Check, localHold int64) *scriptCall {
	holdArg := "0"
	if c.Hold {
		holdArg = "1"
	}
	keys := []string{s.bucketKey(org)}
	args := []any{s.clockArg(), c.Req.Capacity, c.Req.Rate, c.Tok.Capacity, c.Tok.Rate,
		c.ReqCost, c.TokCost, holdArg, localHold}
	b := c.Budget
	if !b.On() {
		return &scriptCall{kind: kindExact, keys: keys, args: args}
	}
	for _, p := range b.Periods {
		keys = append(keys, s.budgetKey(org, p.Name))
	}
	args = append(args, b.Limit, b.Cost,
		b.Periods[1].Start.UnixMicro(), b.Periods[1].End.UnixMicro(), b.Periods[2].End.UnixMicro())
	return &scriptCall{kind: kindAdmit, keys: keys, args: args}
}

// leaseGrant is leaseBody's answer.
type leaseGrant struct {
	req, tok               int64 // units granted
	r, t                   int64 // Redis's levels after the grant (units)
	rwait, twait, holdwait int64 // µs
}

// lease gives back rback and tback units of org's old lease and takes a
// new one of rslice and tslice units, in one script (see leaseBody),
// sent like an admission. c is the admission that needs it.
func (s *Store) lease(ctx context.Context, org string, c store.Check, rslice, tslice, rback, tback int64) (leaseGrant, error) {
	res, err := s.run(ctx, kindLease, []string{s.bucketKey(org)}, s.clockArg(),
		c.Req.Capacity, c.Req.Rate, c.Tok.Capacity, c.Tok.Rate, c.ReqCost, c.TokCost, rslice, tslice, rback, tback)
	var g leaseGrant
	if err == nil {
		if g, err = parseGrant(res); err != nil {
			s.scriptFailed("script", err)
		}
	}
	return g, err
}

func parseGrant(res any) (leaseGrant, error) {
	var n [7]int64
	if err := int64s(res, n[:]); err != nil {
		return leaseGrant{}, err
	}
	return leaseGrant{req: n[0], tok: n[1], r: n[2], t: n[3], rwait: n[4], twait: n[5], holdwait: n[6]}, nil
}

var errBadReply = errors.New("unexpected reply from the admission script")

// int64s reads a script's reply of len(out) integers into out.
func int64s(res any, out []int64) error {
	v, ok := res.([]any)
	if !ok || len(v) != len(out) {
		return fmt.Errorf("%w: %T", errBadReply, res)
	}
	for i := range v {
		if out[i], ok = v[i].(int64); !ok {
			return fmt.Errorf("%w: %T at %d", errBadReply, v[i], i)
		}
	}
	return nil
}

// parseOutcome reads admitBody's answer, or exactBody's (three numbers
// when it admits, six when it refuses; no budget).
func parseOutcome(res any) (store.Outcome, error) {
	var n [11]int64
	if v, ok := res.([]any); ok && (len(v) == 3 || len(v) == 6) {
		if err := int64s(res, n[:len(v)]); err != nil {
			return store.Outcome{}, err
		}
		if len(v) == 3 && n[0] != 1 {
			return store.Outcome{}, fmt.Errorf("%w: a refusal without its waits", errBadReply)
		}
		return store.Outcome{Allowed: n[0] == 1, Req: n[1], Tok: n[2], ReqWait: n[3], TokWait: n[4], HoldWait: n[5]}, nil
	}
	if err := int64s(res, n[:]); err != nil {
		return store.Outcome{}, err
	}
	if n[6] < 0 || n[6] > 3 {
		return store.Outcome{}, fmt.Errorf("%w: period %d", errBadReply, n[6])
	}
	return store.Outcome{Allowed: n[0] == 1, Req: n[1], Tok: n[2], ReqWait: n[3], TokWait: n[4], HoldWait: n[5],
		Period: max(int(n[6])-1, 0), Spent: n[7], Reserved: n[8], Slot: n[9], BudgetRefused: n[10] == 1}, nil
}
