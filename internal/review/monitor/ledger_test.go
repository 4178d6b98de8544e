package monitor

import (
	"slices"
	"strconv"
	"strings"
)

// Ledger is the monitor's bookkeeping in process, the tests' reference
// model of the Lua: what the scripts do in Redis (guarantee_note,
// guarantee_take, guarantee_reset in Library), step by step, over maps
// instead of keys. The simulations of the monitor run on it, and a test
// replays random operations through both and compares every state. Not
// safe for concurrent use.
type Ledger struct {
	// Window is the correction window (in the clock's units): an entry is
	// taken only once its newest label is this old. Horizon, when not "",
	// is the first audited entry with no label at all: Take stops before
	// it, so that the evidence is the complete prefix.
	Window  int64
	Horizon string
	// Refused counts, per group, the entries with more of its questions
	// than Params.MaxQuestions: not observed.
	Refused map[string]int

	Params Params
	// States and Alarms are the state hash and the alarm set.
	States map[string]State
	Alarms map[string]bool
	// pending: entry -> its observation so far; due: entry -> when it is
	// taken (any clock's unit, milliseconds in Redis).
	pending map[string]*pendingEntry
	taken   map[string]bool
	seen    map[string]bool
	// kept: a taken entry's observations, for late corrections
	// (ledger_correct_test.go).
	kept map[string]*keptEntry
	// queue is the pending entries in entry order, as the store's sorted
	// set holds them: Take takes a prefix of it.
	queue []string
}

type pendingEntry struct {
	due       int64
	requestID string
	// total is how many questions of the entry feed a group (its audited
	// auto questions): the entry is complete once that many are noted;
	// at is when its newest label was noted.
	total     int
	at        int64
	questions []QuestionLabel // an entry holds few: a slice beats a map
}

// QuestionLabel is the current label of one labelled auto question of an
// audited entry: its group's Member and whether the label agrees.
type QuestionLabel struct {
	Question, Member string
	Agree            bool
}

// Taken is the state of a group after an observation, and whether that
// observation raised its alarm.
type Taken struct {
	Member string
	State  State
	Raised bool
}

// NewLedger returns an empty ledger for the monitor p.
func NewLedger(p Params) *Ledger {
	return &Ledger{Params: p, States: map[string]State{}, Alarms: map[string]bool{},
		pending: map[string]*pendingEntry{}, taken: map[string]bool{}, seen: map[string]bool{}, kept: map[string]*keptEntry{}}
}

// Note records the current label of a question of entry (an id whose byte
// order is entry order: the store's fixed-width member), made at a time
// whose entry will be taken at due when it is its first label. A later
// label of the same question replaces it until the entry is taken; a label
// after that changes nothing.
func (l *Ledger) Note(entry string, due int64, requestID string, q QuestionLabel) {
	l.NoteOf(entry, due, requestID, 0, 0, q)
}

// NoteOf is Note for an entry with total questions that feed a group, the
// label noted at time at: Take takes the entry only once total of its
// questions are noted and Window has passed since its newest label.
func (l *Ledger) NoteOf(entry string, due int64, requestID string, total int, at int64, q QuestionLabel) {
	if l.taken[entry] {
		return
	}
	p := l.pending[entry]
	if p == nil {
		p = &pendingEntry{due: due, requestID: requestID}
		l.pending[entry] = p
		i, _ := slices.BinarySearch(l.queue, entry)
		l.queue = slices.Insert(l.queue, i, entry)
	}
	p.total, p.at = total, max(p.at, at)
	for i := range p.questions {
		if p.questions[i].Question == q.Question {
			p.questions[i] = q
			return
		}
	}
	p.questions = append(p.questions, q)
}

// Take observes, in entry order, the pending entries that are due at now,
// stopping at the first that is not (so that an entry labelled later than
// a newer one but within settle still comes first), at most limit of them.
// Each entry is one observation of each group among its questions: its
// questions' agreeing and labelled counts, a question whose (model,
// request id, question) was counted before left out. It returns the
// number of entries taken and the groups observed.
func (l *Ledger) Take(now int64, limit int) (int, []Taken) {
	var out []Taken
	n := 0
	// Entry order, stopping at the first entry that is not ready: the
	// entries taken are a prefix of the queue.
	for _, e := range l.queue {
		if n == limit {
			break
		}
		p := l.pending[e]
		if !l.ready(e, now) {
			break
		}
		n++
		delete(l.pending, e)
		l.taken[e] = true
		var counts []groupCount
		for _, q := range p.questions {
			_, model, _ := strings.Cut(q.Member, ":")
			if p.requestID != "" {
				key := strconv.Itoa(len(model)) + ":" + model + strconv.Itoa(len(p.requestID)) + ":" + p.requestID + q.Question
				if l.seen[key] {
					continue
				}
				l.seen[key] = true
			}
			i := slices.IndexFunc(counts, func(c groupCount) bool { return c.member == q.Member })
			if i < 0 {
				i = len(counts)
				counts = append(counts, groupCount{member: q.Member})
			}
			counts[i].labels++
			if q.Agree {
				counts[i].agree++
			}
			counts[i].questions = append(counts[i].questions, q)
		}
		slices.SortFunc(counts, func(a, b groupCount) int { return strings.Compare(a.member, b.member) })
		for _, c := range counts {
			if l.Params.MaxQuestions > 0 && c.labels > int64(l.Params.MaxQuestions) {
				if l.Refused == nil {
					l.Refused = map[string]int{}
				}
				l.Refused[c.member]++
				continue
			}
			bet := l.state(c.member).At(l.Params).Bet
			s, raised := Update(l.Params, l.state(c.member), c.agree, c.labels)
			l.keep(e, c, bet, s.Sequence)
			l.States[c.member] = s
			if raised {
				l.Alarms[c.member] = true
			}
			out = append(out, Taken{Member: c.member, State: s, Raised: raised})
		}
	}
	l.queue = slices.Delete(l.queue, 0, n)
	return n, out
}

// groupCount is an entry's labelled and agreeing questions of one group.
type groupCount struct {
	member        string
	agree, labels int64
	questions     []QuestionLabel // the questions counted
}

// state is a group's stored state, or the fresh one (in alarm when the
// alarm set holds the group without a state).
func (l *Ledger) state(m string) State {
	if s, ok := l.States[m]; ok {
		return s
	}
	s := Fresh(l.Params.Target)
	s.Alarm = l.Alarms[m]
	return s
}

// Reset starts the group's next sequence, alarm cleared; false for a group
// with neither a state nor an alarm.
func (l *Ledger) Reset(m string) (State, bool) {
	if _, ok := l.States[m]; !ok && !l.Alarms[m] {
		return State{}, false
	}
	s := l.state(m).Restarted(l.Params.Target)
	l.States[m] = s
	delete(l.Alarms, m)
	return s, true
}

// Pending is the number of entries awaiting their observation.
func (l *Ledger) Pending() int { return len(l.pending) }

// ready reports whether the pending entry is complete and due at now: its
// first label settled, every question that feeds a group noted, its newest
// label older than Window, and before Horizon.
func (l *Ledger) ready(entry string, now int64) bool {
	p := l.pending[entry]
	return p.due <= now && len(p.questions) >= p.total && now-p.at >= l.Window &&
		(l.Horizon == "" || entry < l.Horizon)
}
