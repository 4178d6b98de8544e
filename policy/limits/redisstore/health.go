package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Health is judged per Redis node: on a Redis Cluster, an organization
// whose slot lives on a master that answers stays exact while another
// master is down, and only the organizations of the lost node take the
// on_store_error path. A node is lost after lostAfter consecutive outage
// errors of its own calls; a probe then runs a keyed script on it (not a
// PING, which a cluster node answers while its keyed commands still get
// CLUSTERDOWN) until it answers. The store's `redis lost` entry is logged
// when the first node is lost and `redis back` when the last one is back:
// one of each per outage, however many nodes it takes down.

// health is one Redis node's health as this store sees it, or (the
// store's slotMap) that of a cluster's slot map.
type health struct {
	addr     string // the node's address; "" for the slot map
	failures atomic.Int32
	lost     atomic.Bool
	// probeKey is a key of the last call that failed here: one the node
	// serves (or served), for the probe's keyed script.
	probeKey atomic.Pointer[string]
}

// healthTable is a store's view of its nodes' health.
type healthTable struct {
	mu sync.Mutex // guards lostNodes and orders the lost and back entries
	// lostNodes counts the nodes (and the slot map) counted lost.
	lostNodes int
	// down is lostNodes > 0, for Up without the lock.
	down atomic.Bool
	// nodes counts the nodes this store has sent to (its batchers), and
	// nodesLost those of them lost.
	nodes, nodesLost atomic.Int32
	// slotMap is a cluster's slot map: lost when no node can be found
	// for a key (every seed node unreachable).
	slotMap health
}

// allLost reports whether nothing can be sent: the slot map or every
// node the store knows is lost.
func (t *healthTable) allLost() bool {
	n := t.nodes.Load()
	return t.slotMap.lost.Load() || n > 0 && t.nodesLost.Load() == n
}

// errLost is a script not sent because its node is lost: the probe has
// not seen it answer again. It wraps errNotSent.
var errLost = errors.New("redis lost")

// errNodeLost is errLost as run returns it: not sent.
var errNodeLost = fmt.Errorf("%w: %w", errNotSent, errLost)

// observe tracks h's node's health from one call's result; key is the
// call's first key.
func (s *Store) observe(ctx context.Context, h *health, key string, err error) {
	if err == nil {
		if h.failures.Load() != 0 {
			h.failures.Store(0)
		}
		return
	}
	if ctx.Err() != nil || errors.Is(err, errLost) {
		return // the caller went away, or nothing was sent: that says nothing new
	}
	class, outage := classify(err)
	if class == "moved" {
		return // the cluster is fine, the slot map was stale (see pipeline)
	}
	if !outage {
		s.scriptFailed(class, err)
		return
	}
	h.probeKey.Store(&key)
	if h.failures.Add(1) < lostAfter || !h.lost.CompareAndSwap(false, true) {
		return
	}
	s.nodeLost(h, class, err)
}

// scriptFailed logs a script or data error: a bug to fix, not an outage to
// ride out (Redis answers, so probing it would only flap). The first one
// at error level, the rest at debug.
func (s *Store) scriptFailed(class string, err error) {
	lvl := zap.DebugLevel
	if s.scriptErrSeen.CompareAndSwap(false, true) {
		lvl = zap.ErrorLevel
	}
	if ce := s.logger.Check(lvl, "redis script failed"); ce != nil {
		ce.Write(zap.String("error_class", class), zap.Error(err))
	}
}

// nodeLost counts h's node lost (h.lost is set) and starts its probe.
func (s *Store) nodeLost(h *health, class string, err error) {
	t := &s.health
	t.mu.Lock()
	if h != &t.slotMap {
		t.nodesLost.Add(1)
	}
	t.lostNodes++
	if t.lostNodes == 1 {
		t.down.Store(true)
		s.logger.Warn("redis lost", zap.String("node", h.addr), zap.String("error_class", class), zap.Error(err))
	} else if ce := s.logger.Check(zap.DebugLevel, "redis node lost"); ce != nil {
		ce.Write(zap.String("node", h.addr), zap.String("error_class", class), zap.Error(err))
	}
	t.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	// A settlement waiting for room in a full queue now drops instead
	// (see full): the lost node's entries stay queued until its probe
	// sees it again, and its request must not wait out the outage.
	s.space.Broadcast()
	if !s.closed {
		s.wg.Add(1)
		go s.probe(h)
	}
}

// nodeBack counts h's node answering again and sends what waited for it.
func (s *Store) nodeBack(h *health) {
	h.failures.Store(0)
	t := &s.health
	t.mu.Lock()
	h.lost.Store(false)
	if h != &t.slotMap {
		t.nodesLost.Add(-1)
	}
	t.lostNodes--
	if t.lostNodes == 0 {
		t.down.Store(false)
		s.logger.Info("redis back", zap.String("node", h.addr))
	} else if ce := s.logger.Check(zap.DebugLevel, "redis node back"); ce != nil {
		ce.Write(zap.String("node", h.addr))
	}
	t.mu.Unlock()
	s.wake() // what queued up meanwhile
}

// probe runs the keyed probe on h's node with backoff until it answers.
func (s *Store) probe(h *health) {
	defer s.wg.Done()
	delay := s.probeMin
	for {
		t := time.NewTimer(delay)
		select {
		case <-s.done:
			t.Stop()
			return
		case <-t.C:
		}
		if s.answers(h) {
			s.nodeBack(h)
			return
		}
		s.wakeForResends()
		delay = min(2*delay, s.probeMax)
	}
}

// probeScript reads its key: a keyed script, refused as the store's own
// scripts are (CLUSTERDOWN, TRYAGAIN, LOADING, ...) while the node cannot
// serve them, where a PING would be answered.
var probeScript = redis.NewScript(`return redis.call('EXISTS', KEYS[1])`)

// IsProbe reports whether cmd runs the health probe's script: for a hook
// that tells the store's own traffic from its probing of a lost node.
func IsProbe(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	switch name, _ := args[0].(string); strings.ToLower(name) {
	case "evalsha":
		sha, _ := args[1].(string)
		return sha == probeScript.Hash()
	case "eval":
		src, _ := args[1].(string)
		return src == "return redis.call('EXISTS', KEYS[1])"
	}
	return false
}

// answers reports whether h's node serves the store's scripts again,
// within store_timeout: the probe script on the key of its last failed
// call. A key whose slot has moved to another master (a failover) counts
// as answered: its organizations go to that master now, under that
// master's health.
func (s *Store) answers(h *health) bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	key := ""
	if k := h.probeKey.Load(); k != nil {
		key = *k
	}
	node, err := s.node(ctx, key)
	if err != nil {
		return false
	}
	if h.addr != "" && node.Options().Addr != h.addr {
		return true
	}
	err = probeScript.Run(ctx, node, []string{key}).Err()
	if _, moved := redis.IsMovedError(err); moved {
		s.reloadSlots(ctx)
		return true
	}
	if _, ask := redis.IsAskError(err); ask {
		return true
	}
	return err == nil
}

// reloadSlots has a cluster client load its slot map again, in the
// background: a MOVED or ASK said it is stale.
func (s *Store) reloadSlots(ctx context.Context) {
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		cc.ReloadState(ctx)
	}
}

// classify names an error for logs and tells whether it means Redis is (at
// least partly) unavailable rather than that it refused the script.
func classify(err error) (class string, outage bool) {
	var rerr redis.Error
	var nerr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout", true
	case errors.Is(err, redis.ErrClosed):
		return "client_closed", true
	case errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted):
		return "pool_exhausted", true
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused", true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection_closed", true
	case errors.Is(err, redis.Nil), errors.Is(err, errBadReply):
		return "script", false
	case errors.As(err, &rerr):
		switch {
		case redis.IsMaxClientsError(err), hasCode(rerr, unavailableCodes):
			return "unavailable", true
		case redis.IsAuthError(err):
			return "auth", true
		}
		if _, moved := redis.IsMovedError(err); moved {
			return "moved", false
		}
		if _, ask := redis.IsAskError(err); ask {
			return "moved", false
		}
		return "script", false
	case errors.As(err, &nerr) && nerr.Timeout():
		return "timeout", true
	}
	return "connection", true
}

// refusedCodes are the error codes with which Redis refuses a script
// before it writes anything: the cluster checks a command before it runs
// (CLUSTERDOWN, MOVED, ASK, TRYAGAIN), as does a server loading its data
// (LOADING), a replica cut off from its master (MASTERDOWN), one running
// another script (BUSY) or missing this one (NOSCRIPT); a script is
// stopped at its first write by READONLY (a replica), OOM (maxmemory),
// NOREPLICAS (min-replicas-to-write) and MISCONF (a failing save), none
// of which Redis checks again once a script has written.
var refusedCodes = append([]string{"MOVED ", "ASK ", "NOSCRIPT "}, unavailableCodes...)

// unavailableCodes are the refusals that say the node cannot serve the
// store's scripts now: an outage of that node.
var unavailableCodes = []string{"CLUSTERDOWN ", "TRYAGAIN ", "LOADING ", "MASTERDOWN ", "BUSY ",
	"READONLY ", "OOM ", "NOREPLICAS ", "MISCONF "}

// hasCode reports whether a Redis error reply starts with one of codes.
func hasCode(rerr redis.Error, codes []string) bool {
	msg := rerr.Error()
	for _, code := range codes {
		if strings.HasPrefix(msg, code) {
			return true
		}
	}
	return false
}

// notSent tells whether err proves the script never ran: it never reached
// Redis (no connection could be had, a dial failed, the client or pool
// was closed, the call left its node's queue before its pipeline was
// written or its node is lost), or Redis refused it before it wrote
// anything (refusedCodes, and a connection refused at its handshake:
// maxclients, authentication). Only such a settlement or lease give-back
// is queued again, or, by a closed limiter, counted as dropped; any other
// error (a timeout after the write, a connection broken mid-reply) may
// have let it run, and a script debits: an admission or lease exchange is
// not sent again, a settlement only with its id (see answerLost).
func notSent(err error) bool {
	if errors.Is(err, errNotSent) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, redis.ErrPoolExhausted) || errors.Is(err, redis.ErrClosed) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	return redis.IsMaxClientsError(err) || redis.IsAuthError(err) || hasCode(rerr, refusedCodes)
}
