// Package memstore is the answer cache's in-process store: a
// least-recently-used map of at most a number of entries, each kept for a
// fixed time. Stores are shared through a usage pool by name, so that the
// configs of a reload that keeps the cache's settings keep its entries, as
// the in-process buckets are kept.
package memstore

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// stores holds the in-process stores across config reloads, by name (the
// key prefix and every cache setting).
var stores = caddy.NewUsagePool()

// Acquire returns the store of that name, new or shared with the configs
// holding it, and the function that lets go of it (once; the last holder's
// release drops the entries).
func Acquire(name string, maxEntries int, ttl time.Duration) (*Store, func() error) {
	v, _, _ := stores.LoadOrNew(name, func() (caddy.Destructor, error) {
		return New(maxEntries, ttl, time.Now), nil
	})
	var once sync.Once
	return v.(*Store), func() error {
		var err error
		once.Do(func() { _, err = stores.Delete(name) })
		return err
	}
}

// Store is an LRU of at most maxEntries values, each answered for ttl after
// it was set. It is safe for concurrent use.
type Store struct {
	maxEntries int
	ttl        time.Duration
	now        func() time.Time

	mu    sync.Mutex
	order *list.List // of *entry, most recently used first
	items map[string]*list.Element
}

type entry struct {
	key     string
	value   []byte
	expires time.Time
}

// New returns an empty store on the clock now.
func New(maxEntries int, ttl time.Duration, now func() time.Time) *Store {
	return &Store{maxEntries: max(maxEntries, 1), ttl: ttl, now: now, order: list.New(), items: make(map[string]*list.Element)}
}

// Get returns the value set for key, if it has not expired. The value is
// shared: the caller must not change it.
func (s *Store) Get(_ context.Context, key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.items[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*entry)
	if !s.now().Before(e.expires) {
		s.remove(el)
		return nil, false
	}
	s.order.MoveToFront(el)
	return e.value, true
}

// Set stores value under key for the store's ttl, replacing what key held,
// and evicts the least recently used entries past maxEntries. The store
// keeps value: the caller must not change it afterwards.
func (s *Store) Set(_ context.Context, key string, value []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.items[key]; ok {
		s.remove(el)
	}
	s.items[key] = s.order.PushFront(&entry{key: key, value: value, expires: s.now().Add(s.ttl)})
	for s.order.Len() > s.maxEntries {
		s.remove(s.order.Back())
	}
}

// Len is the number of entries held, expired ones not yet removed included.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len()
}

func (s *Store) remove(el *list.Element) {
	delete(s.items, s.order.Remove(el).(*entry).key)
}

// Destruct drops the entries when the last config holding the store lets
// go of it.
func (s *Store) Destruct() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.order.Init()
	s.items = make(map[string]*list.Element)
	return nil
}
