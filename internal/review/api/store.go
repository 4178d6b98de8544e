package api

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"
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
// reviewer, time), so an entry trimmed from the stream still exports. For
// an escalated question the record is its two lines, the first answer's
// and the second's, joined by a newline (a JSON line holds none), so that
// both are written, replaced and exported together.
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
	// cursor is where the monitor's horizon search starts (horizon.go).
	cursor horizonCursor
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
//	ARGV: index member, monitor on (1|0), due (Unix ms), request id, the
//	      entry's questions that feed a group, now (Unix ms), then per
//	      label: question id, record, group member ("" for none), agree (1|0)
//
//go:embed put.lua
var putLua string

var putScript = redis.NewScript(monitor.Library + putLua)

// put stores the label records of entry id in the order given, replacing
// those of the same questions and keeping the others, indexes the entry,
// and with the monitor on notes the labels that feed a group, the entry
// to be observed at due (when this is its first label) once total of its
// questions that feed a group are labelled and the window has passed
// since now, its newest label, in one script.
func (s *store) put(ctx context.Context, id record.ID, requestID string, writes []labelWrite, monitorOn bool, due time.Time, total int, now time.Time) error {
	if len(writes) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	on := "0"
	if monitorOn {
		on = "1"
	}
	args := make([]any, 0, 6+4*len(writes))
	args = append(args, indexMember(id), on, due.UnixMilli(), requestID, total, now.UnixMilli())
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

// take observes every pending entry due at now, complete and older than
// window, before the first audited entry with no label, and returns the
// groups observed.
func (s *store) take(ctx context.Context, now time.Time, p monitor.Params, window time.Duration) ([]monitor.Observed, error) {
	horizon, err := s.horizon(ctx)
	if err != nil {
		return nil, err
	}
	return s.monitor.Take(ctx, now, p, window, horizon)
}

// errStop ends an export early without an error.
var errStop = errors.New("stop")

// export hands each stored label record to emit, in entry id order and,
// within an entry, in question id order, then a pending line (record.Label
// with Pending: label and agree null) for each question of an audited
// entry that has no stored record, so that an export holds the whole
// audited sample. It walks the labeled index and the stream together,
// batch entries per round trip of each, each bounded by the store's
// timeout (the whole export is bounded only by ctx: it runs as long as
// the client reads). An entry trimmed from the stream exports its stored
// records only; an audited entry with no label exports its questions as
// pending lines. Records written while it runs show up when their entry
// comes after the cursors.
func (s *store) export(ctx context.Context, batch int64, emit func(records []string) error) error {
	index := &indexCursor{s: s, batch: batch, from: "-"}
	stream := &streamCursor{s: s, batch: batch}
	for {
		if err := index.fill(ctx); err != nil {
			return err
		}
		if err := stream.fill(ctx); err != nil {
			return err
		}
		if index.done() && stream.done() {
			return nil
		}
		// Up to the smaller of the two batches' last ids, both cursors
		// know every entry: merge that far.
		limit, bounded := index.last()
		if l, ok := stream.last(); ok && (!bounded || l.Compare(limit) < 0) {
			limit, bounded = l, true
		}
		var labelled []string
		var entries []*record.Entry
		for {
			i, iok := index.peek()
			e, eok := stream.peek()
			if iok && bounded && i.Compare(limit) > 0 {
				iok = false
			}
			if eok && bounded && e.id.Compare(limit) > 0 {
				eok = false
			}
			if !iok && !eok {
				break
			}
			switch {
			case iok && eok && i == e.id:
				index.next()
				stream.next()
				labelled, entries = append(labelled, i.String()), append(entries, e.entry)
			case iok && (!eok || i.Compare(e.id) < 0):
				index.next()
				labelled, entries = append(labelled, i.String()), append(entries, nil)
			default:
				stream.next()
				if e.entry.Audit {
					labelled, entries = append(labelled, ""), append(entries, e.entry)
				}
			}
		}
		records, err := s.exportRecords(ctx, labelled, entries)
		if err != nil {
			return err
		}
		if len(records) > 0 {
			if err := emit(records); err != nil {
				if errors.Is(err, errStop) {
					return nil
				}
				return err
			}
		}
	}
}

// exportRecords reads the stored records of the labelled entries (ids[i]
// != "") and writes each entry's records, then its pending lines (for an
// audited entry read from the stream, entries[i] != nil).
func (s *store) exportRecords(ctx context.Context, ids []string, entries []*record.Entry) ([]string, error) {
	var read []string
	for _, id := range ids {
		if id != "" {
			read = append(read, id)
		}
	}
	stored, err := s.labels(ctx, read)
	if err != nil {
		return nil, err
	}
	var records []string
	next := 0
	for i, id := range ids {
		var qs map[string]string
		if id != "" {
			qs = stored[next]
			next++
		}
		keys := make([]string, 0, len(qs))
		for q := range qs {
			keys = append(keys, q)
		}
		slices.Sort(keys)
		for _, q := range keys {
			records = append(records, recordLines(qs[q])...)
		}
		if e := entries[i]; e != nil && e.Audit {
			records = append(records, pendingLines(e, qs)...)
		}
	}
	return records, nil
}

// recordLines are the `/labels` lines of a stored record: one, or an
// escalated question's two.
func recordLines(rec string) []string { return strings.Split(rec, "\n") }

// firstLine is a stored record's first line: the first answer's.
func firstLine(rec string) string {
	line, _, _ := strings.Cut(rec, "\n")
	return line
}

// pendingLines are the `/labels` lines of e's questions with no stored
// record: label and agree null, an escalated question's second answer's
// line beside its first's.
func pendingLines(e *record.Entry, stored map[string]string) []string {
	var out []string
	seen := map[string]bool{}
	for i := range e.Questions {
		q := &e.Questions[i]
		if _, ok := stored[q.ID]; ok || seen[q.ID] {
			continue
		}
		seen[q.ID] = true
		for _, l := range e.Lines(q, record.Label{Pending: true}) {
			if b, err := l.Marshal(); err == nil { // RawMessages came from the stream's JSON
				out = append(out, string(b))
			}
		}
	}
	return out
}

// indexCursor walks the labeled index in batches.
type indexCursor struct {
	s     *store
	batch int64
	from  string
	buf   []record.ID
	end   bool
}

func (c *indexCursor) done() bool { return c.end && len(c.buf) == 0 }

func (c *indexCursor) fill(ctx context.Context) error {
	if len(c.buf) > 0 || c.end {
		return nil
	}
	step, cancel := context.WithTimeout(ctx, c.s.timeout)
	defer cancel()
	members, err := c.s.client.ZRangeArgs(step, redis.ZRangeArgs{
		Key: c.s.indexKey(), Start: c.from, Stop: "+", ByLex: true, Count: c.batch,
	}).Result()
	if err != nil {
		return err
	}
	if int64(len(members)) < c.batch {
		c.end = true
	}
	if len(members) > 0 {
		c.from = "(" + members[len(members)-1]
	}
	for _, m := range members {
		if text, ok := memberID(m); ok {
			id, _ := record.ParseID(text)
			c.buf = append(c.buf, id)
		}
	}
	return nil
}

// last is the batch's last id, when more may follow it.
func (c *indexCursor) last() (record.ID, bool) {
	if c.end || len(c.buf) == 0 {
		return record.ID{}, false
	}
	return c.buf[len(c.buf)-1], true
}

func (c *indexCursor) peek() (record.ID, bool) {
	if len(c.buf) == 0 {
		return record.ID{}, false
	}
	return c.buf[0], true
}

func (c *indexCursor) next() { c.buf = c.buf[1:] }

// streamCursor walks the review stream in batches.
type streamCursor struct {
	s     *store
	batch int64
	after string
	buf   []streamEntry
	end   bool
}

type streamEntry struct {
	id    record.ID
	entry *record.Entry
}

func (c *streamCursor) done() bool { return c.end && len(c.buf) == 0 }

func (c *streamCursor) fill(ctx context.Context) error {
	if len(c.buf) > 0 || c.end {
		return nil
	}
	entries, err := c.s.scan(ctx, c.after, c.batch)
	if err != nil {
		return err
	}
	if int64(len(entries)) < c.batch {
		c.end = true
	}
	for i := range entries {
		id, ok := record.ParseID(entries[i].ID)
		if ok {
			c.buf = append(c.buf, streamEntry{id, &entries[i]})
		}
		c.after = entries[i].ID
	}
	return nil
}

func (c *streamCursor) last() (record.ID, bool) {
	if c.end || len(c.buf) == 0 {
		return record.ID{}, false
	}
	return c.buf[len(c.buf)-1].id, true
}

func (c *streamCursor) peek() (streamEntry, bool) {
	if len(c.buf) == 0 {
		return streamEntry{}, false
	}
	return c.buf[0], true
}

func (c *streamCursor) next() { c.buf = c.buf[1:] }
