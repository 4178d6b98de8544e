package api

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/review/monitor"
	"github.com/systemone/systemone-gateway/internal/review/record"
)

// Label storage
//
// Labels are kept apart from the stream, so that the stream's MAXLEN
// trimming never takes them, under two kinds of keys:
//
//	<prefix>review:{<stream>}:entry:<entry id>   hash: question id -> label record
//	<prefix>review:{<stream>}:labeled            sorted set: one member per labelled entry
//
// A label record is the exact JSON line GET /labels exports for that
// question: it carries everything the export needs (the entry's ids, model,
// the question's type, route, confidence and answer, the label, agree,
// reviewer, time), so an entry trimmed from the stream still exports.
//
// One hash per entry makes "a later PUT replaces the labels of the
// questions it names" a plain HSET of those fields, with no read-modify-
// write; the sorted set orders the export. Its members all have score 0
// and are the entry id written with fixed-width numbers, so that ZRANGE
// BYLEX walks them in stream order (a plain id would put 1-10 before 1-9)
// and the export pages with a cursor, in bounded batches, without
// HSCAN's unordered walk.
//
// Every key of a write carries the stream name as a Redis Cluster hash tag,
// {<stream>}, so they live in one slot and a label write is one script
// (atomic: an entry is never indexed without its labels or the reverse,
// nor a label stored without the guarantee observation it makes), on a
// cluster as on one server. The guarantee monitor's state and alarm set
// (internal/review/monitor) sit under the same tag. The stream key itself is the gateway's and
// may sit in any slot: it is only read, never in a transaction.

// store keeps labels in Redis and reads the review stream. Each round trip
// is bounded by timeout, beyond the caller's context.
type store struct {
	client  redis.UniversalClient
	stream  string
	content string // the stream's content stream
	base    string // "<prefix>review:{<stream>}:"
	// monitor is the guarantee monitor's state, under the same hash tag
	// as the labels.
	monitor *monitor.Store
	timeout time.Duration
}

func newStore(client redis.UniversalClient, prefix, stream string) *store {
	return &store{
		client: client, stream: stream, content: record.ContentStream(stream),
		base: monitor.Base(prefix, stream), timeout: storeTimeout,
		monitor: monitor.NewStore(client, prefix, stream, storeTimeout),
	}
}

func (s *store) indexKey() string          { return s.base + "labeled" }
func (s *store) entryKey(id string) string { return s.base + "entry:" + id }

// indexMember is id as a member of the labeled index: fixed width, so that the
// byte order of members is the order of ids.
func indexMember(id record.ID) string { return fmt.Sprintf("%020d-%020d", id.Ms, id.Seq) }

// memberID turns an index member back into an entry id.
func memberID(m string) (string, bool) {
	if len(m) != 41 || m[20] != '-' {
		return "", false
	}
	id, ok := record.ParseID(m)
	return id.String(), ok
}

// entry reads the stream entry id with its content; ok is false when it is
// not in the stream.
func (s *store) entry(ctx context.Context, id string) (record.Entry, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	msgs, err := s.client.XRangeN(ctx, s.stream, id, id, 1).Result()
	if err != nil || len(msgs) == 0 {
		return record.Entry{}, false, err
	}
	entries := []record.Entry{record.ParseEntry(msgs[0].ID, msgs[0].Values)}
	if err := s.attachContent(ctx, entries); err != nil {
		return record.Entry{}, false, err
	}
	return entries[0], true, nil
}

// scan reads up to n entries, oldest first, after the entry id after
// (exclusive), or from the start when after is "", without their content
// (see attachContent).
func (s *store) scan(ctx context.Context, after string, n int64) ([]record.Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := "-"
	if after != "" {
		start = "(" + after
	}
	msgs, err := s.client.XRangeN(ctx, s.stream, start, "+", n).Result()
	if err != nil {
		return nil, err
	}
	entries := make([]record.Entry, len(msgs))
	for i, m := range msgs {
		entries[i] = record.ParseEntry(m.ID, m.Values)
	}
	return entries, nil
}

// labels returns the stored label records of each entry id: question id
// -> record, empty for an entry without labels. One round trip.
func (s *store) labels(ctx context.Context, ids []string) ([]map[string]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, s.entryKey(id))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]map[string]string, len(ids))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

// labelWrite is one label record to store, and the observation it feeds
// for the guarantee monitor.
type labelWrite struct {
	question, record string
	// group is the group whose process the label feeds, when its entry
	// was drawn by audit and its question routed auto; nil otherwise.
	group *monitor.Group
	agree bool
}

// putScript stores the label records of one entry (HSET, replacing those
// of the same questions), indexes the entry, and with the monitor on notes
// each label that feeds a group (guarantee_note): the entry awaits its
// observation until due, with the labels current then. One script, so a
// label is never stored without its note or the reverse.
//
//	KEYS: entry hash, labeled index, then monitor.LuaKeys
//	ARGV: index member, monitor on (1|0), due (Unix ms), request id, then
//	      per label: question id, record, group member ("" for none), agree (1|0)
//
//go:embed put.lua
var putLua string

var putScript = redis.NewScript(monitor.Library + putLua)

// put stores the label records of entry id in the order given, replacing
// those of the same questions and keeping the others, indexes the entry,
// and with the monitor on notes the labels that feed a group, the entry
// to be observed at due (when this is its first label), in one script.
func (s *store) put(ctx context.Context, id record.ID, requestID string, writes []labelWrite, monitorOn bool, due time.Time) error {
	if len(writes) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	on := "0"
	if monitorOn {
		on = "1"
	}
	args := make([]any, 0, 4+4*len(writes))
	args = append(args, indexMember(id), on, due.UnixMilli(), requestID)
	for _, w := range writes {
		group, agree := "", "0"
		if w.group != nil {
			group = w.group.Member()
		}
		if w.agree {
			agree = "1"
		}
		args = append(args, w.question, w.record, group, agree)
	}
	keys := append([]string{s.entryKey(id.String()), s.indexKey()}, s.monitor.Keys()...)
	return putScript.Run(ctx, s.client, keys, args...).Err()
}

// errStop ends an export early without an error.
var errStop = errors.New("stop")

// export hands each stored label record to emit, in entry id order and,
// within an entry, in question id order, reading batch entries per pair of
// round trips, each bounded by the store's timeout (the whole export is
// bounded only by ctx: it runs as long as the client reads). Records written while it runs show up when their entry comes
// after the cursor.
func (s *store) export(ctx context.Context, batch int64, emit func(records []string) error) error {
	from := "-"
	for {
		step, cancel := context.WithTimeout(ctx, s.timeout)
		members, err := s.client.ZRangeArgs(step, redis.ZRangeArgs{
			Key: s.indexKey(), Start: from, Stop: "+", ByLex: true, Count: batch,
		}).Result()
		cancel()
		if err != nil {
			return err
		}
		if len(members) == 0 {
			return nil
		}
		ids := make([]string, 0, len(members))
		for _, m := range members {
			if id, ok := memberID(m); ok {
				ids = append(ids, id)
			}
		}
		labels, err := s.labels(ctx, ids)
		if err != nil {
			return err
		}
		var records []string
		for _, qs := range labels {
			keys := make([]string, 0, len(qs))
			for q := range qs {
				keys = append(keys, q)
			}
			slices.Sort(keys)
			for _, q := range keys {
				records = append(records, qs[q])
			}
		}
		if err := emit(records); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			return err
		}
		if int64(len(members)) < batch {
			return nil
		}
		from = "(" + members[len(members)-1]
	}
}
