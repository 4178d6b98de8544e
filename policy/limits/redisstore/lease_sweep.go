package redisstore

import (
	"math"
	"time"

	"github.com/systemone/systemone-gateway/policy/limits/store"
)

// The sweeper: leases nobody spends go back to Redis through the
// settlement queue, and entries that hold nothing are forgotten.

func (ls *Leases) startSweeper() {
	ls.startOnce.Do(func() {
		ls.wg.Add(1)
		go ls.sweepLoop()
	})
}

func (ls *Leases) sweepLoop() {
	defer ls.wg.Done()
	t := time.NewTimer(ls.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ls.done:
			return
		case <-t.C:
		}
		ls.sweep(store.Micros(ls.now()))
		t.Reset(ls.sweepEvery)
	}
}

// giveBackItem is one lease's rest on its way back to Redis.
type giveBackItem struct {
	e        *leaseEntry
	org      string
	req, tok int64
}

// sweep gives back the rest of every lease expired at now and forgets the
// entries that hold nothing. While Redis is lost it does nothing: no lease
// is taken meanwhile, and the rests wait in their entries.
func (ls *Leases) sweep(now int64) {
	if !ls.s.Up() {
		return
	}
	flushed := ls.s.flushed.Load()
	var back []giveBackItem
	for i := range ls.shards {
		sh := &ls.shards[i]
		sh.mu.Lock()
		for org, e := range sh.orgs {
			e.mu.Lock()
			switch {
			case e.taking != nil, e.returning && flushed < e.epoch, e.held && now < e.until:
				// In use.
			case e.held && (e.req > 0 || e.tok > 0):
				back = append(back, giveBackItem{e, org, e.req, e.tok})
				e.held, e.req, e.tok = false, 0, 0
				e.seq = ls.seqs.Add(1)
				e.returning, e.epoch = true, math.MaxUint64 // until queued
			case ls.adaptive && e.pace.recent(now, ls.interval):
				// Its pace is still read (the adaptive mode).
			default:
				e.dead = true
				delete(sh.orgs, org)
				ls.size.Add(-1)
			}
			e.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	ls.giveBack(back)
}

// giveBack queues rests for Redis and notes which flush sends each.
func (ls *Leases) giveBack(back []giveBackItem) {
	for _, b := range back {
		epoch := ls.giveBackOne(b.org, b.req, b.tok)
		b.e.mu.Lock()
		b.e.epoch = epoch
		b.e.mu.Unlock()
	}
}

// giveAllBack stops the sweeper and queues every lease's rest for Redis;
// the store's close sends them. No lease is taken after it: admissions
// take the exact path.
func (ls *Leases) giveAllBack() {
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return
	}
	ls.closed = true
	ls.mu.Unlock()
	close(ls.done)
	ls.wg.Wait()
	var back []giveBackItem
	for i := range ls.shards {
		sh := &ls.shards[i]
		sh.mu.Lock()
		for org, e := range sh.orgs {
			e.mu.Lock()
			if e.held && (e.req > 0 || e.tok > 0) {
				back = append(back, giveBackItem{e, org, e.req, e.tok})
			}
			e.held, e.req, e.tok, e.dead = false, 0, 0, true
			e.seq = ls.seqs.Add(1)
			e.mu.Unlock()
			delete(sh.orgs, org)
		}
		sh.mu.Unlock()
	}
	ls.size.Store(0)
	ls.giveBack(back)
}
