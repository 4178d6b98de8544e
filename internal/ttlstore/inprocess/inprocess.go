// Package inprocess is the caches' in-process store: a least-recently-used
// map of at most a number of entries and of bytes, each kept for a fixed
// time. Stores are shared through a usage pool by name, so that the configs
// of a reload that keeps a cache's settings keep its entries, as the
// in-process buckets are kept.
package inprocess

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/systemone/systemone-gateway/internal/ttlstore"
)

// stores holds the in-process stores across config reloads, by name (what
// the cache is, the key prefix and every cache setting).
var stores = caddy.NewUsagePool()

// Limits bound a store.
type Limits struct {
	// Entries is the most entries held (at least 1).
	Entries int
	// Bytes is the most bytes of keys and values held, plus entryOverhead
	// per entry; 0 is no bound but Entries. A value larger than the bound
	// is not stored.
	Bytes int
	// TTL is how long an entry is answered after it was set.
	TTL time.Duration
}

// entryOverhead is what an entry costs besides its key's and value's
// bytes: the list element, the map slot and the entry's fields.
const entryOverhead = 128

// Acquire returns the store of that name, new or shared with the configs
// holding it, and the function that lets go of it (once; the last holder's
// release drops the entries).
func Acquire(name string, limits Limits) (*Store, func() error) {
	v, _, _ := stores.LoadOrNew(name, func() (caddy.Destructor, error) {
		return New(limits, time.Now), nil
	})
	var once sync.Once
	return v.(*Store), func() error {
		var err error
		once.Do(func() { _, err = stores.Delete(name) })
		return err
	}
}

// Store is an LRU within its limits. It is safe for concurrent use.
type Store struct {
	limits Limits
	now    func() time.Time

	mu    sync.Mutex
	bytes int
	order *list.List // of *entry, most recently used first
	items map[string]*list.Element
}

type entry struct {
	key     string
	value   []byte
	size    int
	expires time.Time
}

// New returns an empty store on the clock now.
func New(limits Limits, now func() time.Time) *Store {
	limits.Entries = max(limits.Entries, 1)
	return &Store{limits: limits, now: now, order: list.New(), items: make(map[string]*list.Element)}
}

// Get returns the values set for keys that have not expired. The values
// are shared: the caller must not change them.
func (s *Store) Get(_ context.Context, keys ...string) [][]byte {
	values := make([][]byte, len(keys))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for i, key := range keys {
		el, ok := s.items[key]
		if !ok {
			continue
		}
		e := el.Value.(*entry)
		if !now.Before(e.expires) {
			s.remove(el)
			continue
		}
		s.order.MoveToFront(el)
		values[i] = e.value
	}
	return values
}

// Set stores each value under its key for the store's ttl, replacing what
// the key held, and evicts the least recently used entries past the
// limits. The store keeps the values: the caller must not change them.
func (s *Store) Set(_ context.Context, entries ...ttlstore.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	expires := s.now().Add(s.limits.TTL)
	for _, in := range entries {
		if el, ok := s.items[in.Key]; ok {
			s.remove(el)
		}
		size := len(in.Key) + len(in.Value) + entryOverhead
		if s.limits.Bytes > 0 && size > s.limits.Bytes {
			continue
		}
		s.items[in.Key] = s.order.PushFront(&entry{key: in.Key, value: in.Value, size: size, expires: expires})
		s.bytes += size
		for s.order.Len() > s.limits.Entries || s.limits.Bytes > 0 && s.bytes > s.limits.Bytes {
			s.remove(s.order.Back())
		}
	}
}

// Delete removes the keys.
func (s *Store) Delete(_ context.Context, keys ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, key := range keys {
		if el, ok := s.items[key]; ok {
			s.remove(el)
		}
	}
}

// Len is the number of entries held, expired ones not yet removed included.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len()
}

// Bytes is what the entries held count against Limits.Bytes.
func (s *Store) Bytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

func (s *Store) remove(el *list.Element) {
	e := s.order.Remove(el).(*entry)
	delete(s.items, e.key)
	s.bytes -= e.size
}

// Destruct drops the entries when the last config holding the store lets
// go of it.
func (s *Store) Destruct() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.order.Init()
	s.items = make(map[string]*list.Element)
	s.bytes = 0
	return nil
}

var _ ttlstore.Store = (*Store)(nil)
