package monitor

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store is the monitor's state in Redis for one review stream: it takes
// the settled observations, reads every group's state and resets a group.
// The labels' own script notes each observation (guarantee_note, in the
// review API's label store), in the same slot. Each round trip is bounded
// by the store's timeout, beyond the caller's context.
type Store struct {
	client  redis.UniversalClient
	stream  string
	base    string // Base(prefix, stream)
	timeout time.Duration
}

// NewStore returns the monitor's store of the review stream under prefix,
// each round trip bounded by timeout.
func NewStore(client redis.UniversalClient, prefix, stream string, timeout time.Duration) *Store {
	return &Store{client: client, stream: stream, base: Base(prefix, stream), timeout: timeout}
}

// Keys are the keys of the Lua functions (LuaKeys) for the store's
// stream, for a script that notes labels.
func (s *Store) Keys() []string { return LuaKeys(s.base) }

// Observed is a group's state after an observation, and whether the
// observation raised its alarm.
type Observed struct {
	Group  Group
	State  State
	Raised bool
}

// takeScript observes the pending entries due at now, in entry order
// (guarantee_take): KEYS LuaKeys; ARGV now (Unix ms), limit, LuaArgs, the
// correction window (ms), the horizon (the index member of the first
// audited entry with auto questions and no label, "" for none),
// max_questions. It returns the number of entries taken, then per group observed: member,
// state, raised (1|0). Every instance may run it at any time: it is
// atomic, so each entry is observed exactly once.
//
//go:embed lua/take.lua
var takeLua string

var takeScript = redis.NewScript(Library + takeLua)

// takeBatch is how many entries one take script observes at most, so
// that a backlog never holds Redis for long.
const takeBatch = 200

// Take observes every pending entry due at now, complete and with its
// newest label older than window, before horizon (the first audited entry
// with auto questions and no label, "" for none), in batches, and returns
// the groups observed.
func (s *Store) Take(ctx context.Context, now time.Time, p Params, window time.Duration, horizon string) ([]Observed, error) {
	var updates []Observed
	for {
		step, cancel := context.WithTimeout(ctx, s.timeout)
		args := append([]any{now.UnixMilli(), takeBatch}, anys(LuaArgs(p))...)
		args = append(args, window.Milliseconds(), horizon, p.MaxQuestions)
		out, err := takeScript.Run(step, s.client, s.Keys(), args...).StringSlice()
		cancel()
		if err != nil {
			return updates, err
		}
		if len(out) == 0 {
			return updates, fmt.Errorf("take: empty answer")
		}
		if updates, err = appendObserved(updates, out[1:]); err != nil {
			return updates, err
		}
		if n, _ := strconv.Atoi(out[0]); n < takeBatch {
			return updates, nil
		}
	}
}

// appendObserved appends the groups a script answered, as triples:
// member, state, raised (1|0).
func appendObserved(updates []Observed, out []string) ([]Observed, error) {
	for i := 0; i+2 < len(out); i += 3 {
		g, ok := ParseMember(out[i])
		st, err := Decode(out[i+1])
		if !ok || err != nil {
			return updates, fmt.Errorf("guarantee state of %q: %v", out[i], err)
		}
		updates = append(updates, Observed{Group: g, State: st, Raised: out[i+2] == "1"})
	}
	return updates, nil
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Groups reads every group's stored state as the monitor p reads it, and
// the groups in the alarm set without a state (an alarm a gateway
// restored after Redis lost its data) as fresh and in alarm. A state that
// does not read is left out (it was not written by this version).
func (s *Store) Groups(ctx context.Context, p Params) (map[Group]State, error) {
	listed, err := s.List(ctx, p)
	if err != nil {
		return nil, err
	}
	out := make(map[Group]State, len(listed))
	for g, l := range listed {
		out[g] = l.State
	}
	return out, nil
}

// resetScript starts a group's next sequence and clears its alarm, when
// the group has a state or an alarm (guarantee_reset): KEYS LuaKeys; ARGV
// member, target, token. It returns the new state, or nil for a group
// never seen.
//
//go:embed lua/reset.lua
var resetLua string

var resetScript = redis.NewScript(Library + resetLua)

// Reset starts g's next sequence (labels 0, evidence 1, no alarm, a
// smaller alpha) and records a new reset token, so that the gateways tell
// the reset from a lost alarm; found is false for a group never observed.
func (s *Store) Reset(ctx context.Context, g Group, p Params) (State, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var token [12]byte
	_, _ = rand.Read(token[:])
	v, err := resetScript.Run(ctx, s.client, s.Keys(), g.Member(), LuaArgs(p)[0], hex.EncodeToString(token[:])).Text()
	if errors.Is(err, redis.Nil) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, err
	}
	st, err := Decode(v)
	return st, err == nil, err
}
