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

	"github.com/systemone/systemone-gateway/policy/guarantee"
	"github.com/systemone/systemone-gateway/policy/route"
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
// (package guarantee) sit under the same tag. The stream key itself is the gateway's and
// may sit in any slot: it is only read, never in a transaction.

// store keeps labels in Redis and reads the review stream. Each round trip
// is bounded by timeout, beyond the caller's context.
type store struct {
	client  redis.UniversalClient
	stream  string
	content string // the stream's content stream
	base    string // "<prefix>review:{<stream>}:"
	// stateKey and alarmKey are the guarantee monitor's (package
	// guarantee), under the same hash tag as the labels.
	stateKey, alarmKey string
	timeout            time.Duration
}

func newStore(client redis.UniversalClient, prefix, stream string) *store {
	return &store{
		client: client, stream: stream, content: route.ContentStream(stream),
		base: prefix + "review:{" + stream + "}:", timeout: storeTimeout,
		stateKey: guarantee.StateKey(prefix, stream), alarmKey: guarantee.AlarmKey(prefix, stream),
	}
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

// entry reads the stream entry id with its content; ok is false when it is
// not in the stream.
func (s *store) entry(ctx context.Context, id string) (redis.XMessage, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	msgs, err := s.client.XRangeN(ctx, s.stream, id, id, 1).Result()
	if err != nil || len(msgs) == 0 {
		return redis.XMessage{}, false, err
	}
	if err := s.attachContent(ctx, msgs); err != nil {
		return redis.XMessage{}, false, err
	}
	return msgs[0], true, nil
}

// scan reads up to n entries, oldest first, after the entry id after
// (exclusive), or from the start when after is "", without their content
// (see attachContent).
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

// labelWrite is one label record to store, and the observation it makes
// for the guarantee monitor when it is the question's first label.
type labelWrite struct {
	question, record string
	// group is the (model, type) group whose process the label feeds,
	// when its entry was drawn by audit and its question routed auto;
	// nil otherwise.
	group *guarantee.Group
	agree bool
}

// groupUpdate is a group's state after a put that observed it, and
// whether the put raised its alarm.
type groupUpdate struct {
	group  guarantee.Group
	state  guarantee.State
	raised bool
}

// putScript stores the label records of one entry (HSET, replacing those
// of the same questions), indexes the entry, and, for each label that is
// its question's first (HSET added the field) and makes an observation,
// updates its group's e-process and alarm set: one script, so a label is
// never stored without its observation or the reverse, and two reviewers
// labelling the same question at once make one observation, not two.
//
//	KEYS: entry hash, labeled index, guarantee state hash, alarm set
//	ARGV: index member, monitor on (1|0), guarantee.LuaArgs (4), then per
//	      label: question id, record, group member ("" for none), agree (1|0)
//
// It returns, per group observed: member, final state, raised (1|0).
var putScript = redis.NewScript(guarantee.LuaUpdate + `
local on = ARGV[2] == '1'
local target, threshold, max_bet, gain = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local states, raised, order = {}, {}, {}
for i = 7, #ARGV, 4 do
  local added = redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  local group = ARGV[i + 2]
  if added == 1 and on and group ~= '' then
    if states[group] == nil then
      states[group] = redis.call('HGET', KEYS[3], group)
      order[#order + 1] = group
    end
    local r
    states[group], r = guarantee_update(states[group], ARGV[i + 3] == '1', target, threshold, max_bet, gain)
    if r then raised[group] = true end
  end
end
redis.call('ZADD', KEYS[2], 0, ARGV[1])
local out = {}
for _, group in ipairs(order) do
  redis.call('HSET', KEYS[3], group, states[group])
  local r = '0'
  if raised[group] then
    redis.call('SADD', KEYS[4], group)
    r = '1'
  end
  out[#out + 1] = group
  out[#out + 1] = states[group]
  out[#out + 1] = r
end
return out
`)

// put stores the label records of entry id in the order given, replacing
// those of the same questions and keeping the others, indexes the entry,
// and with monitor (nil: off) feeds each first label's observation to its
// group, in one script. It returns the groups observed.
func (s *store) put(ctx context.Context, id streamID, writes []labelWrite, monitor *guarantee.Params) ([]groupUpdate, error) {
	if len(writes) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	args := make([]any, 0, 6+4*len(writes))
	args = append(args, id.member(), "0", "", "", "", "")
	if monitor != nil {
		args[1] = "1"
		for i, v := range guarantee.LuaArgs(*monitor) {
			args[2+i] = v
		}
	}
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
	keys := []string{s.entryKey(id.String()), s.indexKey(), s.stateKey, s.alarmKey}
	out, err := putScript.Run(ctx, s.client, keys, args...).StringSlice()
	if err != nil {
		return nil, err
	}
	updates := make([]groupUpdate, 0, len(out)/3)
	for i := 0; i+2 < len(out); i += 3 {
		g, ok := guarantee.ParseMember(out[i])
		st, err := guarantee.Decode(out[i+1])
		if !ok || err != nil {
			return nil, fmt.Errorf("guarantee state of %q: %v", out[i], err)
		}
		updates = append(updates, groupUpdate{group: g, state: st, raised: out[i+2] == "1"})
	}
	return updates, nil
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
