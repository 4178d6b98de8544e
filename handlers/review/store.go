package review

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
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
// Both keys of a write carry the stream name as a Redis Cluster hash tag,
// {<stream>}, so they live in one slot and a label write is one MULTI/EXEC
// (atomic: an entry is never indexed without its labels or the reverse),
// on a cluster as on one server. The stream key itself is the gateway's and
// may sit in any slot: it is only read, never in a transaction.

// store keeps labels in Redis and reads the review stream. Each round trip
// is bounded by timeout, beyond the caller's context.
type store struct {
	client  redis.UniversalClient
	stream  string
	base    string // "<prefix>review:{<stream>}:"
	timeout time.Duration
}

func newStore(client redis.UniversalClient, prefix, stream string) *store {
	return &store{client: client, stream: stream, base: prefix + "review:{" + stream + "}:", timeout: storeTimeout}
}

func (s *store) indexKey() string          { return s.base + "labeled" }
func (s *store) entryKey(id string) string { return s.base + "entry:" + id }

// streamID is a stream entry id, <ms>-<seq>.
type streamID struct{ ms, seq uint64 }

// parseID reads a full entry id. With partial, a bare <ms> is accepted too
// (as XRANGE reads it: <ms>-0 as a start).
func parseID(s string, partial bool) (streamID, bool) {
	msText, seqText, hasSeq := strings.Cut(s, "-")
	if !hasSeq && !partial {
		return streamID{}, false
	}
	ms, err := strconv.ParseUint(msText, 10, 64)
	if err != nil || !digits(msText) {
		return streamID{}, false
	}
	var seq uint64
	if hasSeq {
		if seq, err = strconv.ParseUint(seqText, 10, 64); err != nil || !digits(seqText) {
			return streamID{}, false
		}
	}
	return streamID{ms, seq}, true
}

// digits rejects the signs strconv accepts.
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func (id streamID) String() string {
	return strconv.FormatUint(id.ms, 10) + "-" + strconv.FormatUint(id.seq, 10)
}

// member is id as a member of the labeled index: fixed width, so that the
// byte order of members is the order of ids.
func (id streamID) member() string { return fmt.Sprintf("%020d-%020d", id.ms, id.seq) }

// memberID turns an index member back into an entry id.
func memberID(m string) (string, bool) {
	if len(m) != 41 || m[20] != '-' {
		return "", false
	}
	id, ok := parseID(m, false)
	return id.String(), ok
}

// entry reads the stream entry id; ok is false when it is not in the stream.
func (s *store) entry(ctx context.Context, id string) (redis.XMessage, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	msgs, err := s.client.XRangeN(ctx, s.stream, id, id, 1).Result()
	if err != nil || len(msgs) == 0 {
		return redis.XMessage{}, false, err
	}
	return msgs[0], true, nil
}

// scan reads up to n entries, oldest first, after the entry id after
// (exclusive), or from the start when after is "".
func (s *store) scan(ctx context.Context, after string, n int64) ([]redis.XMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := "-"
	if after != "" {
		start = "(" + after
	}
	return s.client.XRangeN(ctx, s.stream, start, "+", n).Result()
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

// put stores the label records of entry id (question id -> record),
// replacing those of the same questions and keeping the others, and
// indexes the entry, in one transaction.
func (s *store) put(ctx context.Context, id streamID, records map[string]string) error {
	if len(records) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	fields := make([]string, 0, 2*len(records))
	for q, rec := range records {
		fields = append(fields, q, rec)
	}
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.entryKey(id.String()), fields)
		p.ZAdd(ctx, s.indexKey(), redis.Z{Score: 0, Member: id.member()})
		return nil
	})
	return err
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
