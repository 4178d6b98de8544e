package redisstore

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Settlements are applied exactly once. Each settlement script carries an
// id of its own, a random 64-bit number, and the settlement body records
// it (SET NX PX settledFor, a key of the organization's slot) in the same
// atomic step as its charges and releases: a settlement whose id Redis
// already holds changes nothing. So one whose answer was lost after it was
// written (a timeout, a connection broken mid-reply, a node failing over)
// is sent again, with the same id, until it is answered or retryFor has
// passed since it was first sent, and counts once whether or not the
// first one ran.
//
// The window: Redis holds an id for settledFor from the first run (on its
// own clock; a failover's replica has it with the same absolute expiry).
// The last retry is written at most retryFor after the first send, which
// came before the first run. So a retry meets its id unless Redis runs it
// more than settledFor - retryFor (1 minute) after it was written, as a
// server stalled that long with the command in its buffer would, or a
// replica promoted with a clock that far ahead.
//
// A failover to a replica that had not yet received the settlement is no
// exception: a script's writes reach a replica as one transaction, so the
// replica holds the id and the charge, or neither. In the first case the
// retry changes nothing; in the second it applies the charge the new
// master never had, once.
const (
	// retryFor is how long a settlement whose answer was lost is sent
	// again (by each flush, or once its node is back), from its first
	// send: it covers a failover and the probe seeing the node back (at
	// most ProbeMax, 5s by default, after it is). Past it, the settlement
	// is counted unanswered: its id may have expired.
	retryFor = time.Minute
	// settledFor is how long Redis remembers a settlement's id: twice
	// retryFor (see the window above).
	settledFor = 2 * retryFor
)

// resend is a settlement sent whose answer was lost: it may have run. It is
// sent again as it was, id included, and never merged with the
// organization's later settlements (their sum would carry the same id).
type resend struct {
	org        string
	keys       []string
	args       []any
	firstSent  time.Time
	givingBack bool // it gives a lease's rest back (see queueFlush.backLeft)
}

// settleID is a new settlement's id, in base 36 (at most 13 bytes of key).
func settleID() string {
	return strconv.FormatUint(rand.Uint64(), 36)
}

// settledKey names the key that says org's settlement id has run.
func (s *Store) settledKey(org, id string) string {
	return s.prefix + "{" + keyOrg(org) + "}:s:" + id
}

// answerLost tells whether err says a script was written and its answer
// never came (a timeout, a connection closed mid-reply): it may have run,
// and a settlement is sent again. Redis's own answers are not: an error
// reply that does not prove the script unsent (see notSent) is a script
// or data error, which a second run would repeat.
func answerLost(err error) bool {
	var rerr redis.Error
	return err != nil && !notSent(err) && !errors.As(err, &rerr) && !errors.Is(err, errBadReply)
}

// addResend keeps a settlement whose answer was lost, first sent at
// firstSent, to be sent again by the next flush; it reports false when it
// cannot be (the store closed, or maxPending of them kept already), and
// the caller counts it unanswered. Called with s.mu held.
func (s *Store) addResend(r resend) bool {
	if s.closed || len(s.resends) >= s.maxPending {
		return false
	}
	s.resends = append(s.resends, r)
	return true
}

// expireResends gives up, at now, the settlements kept to send again
// for retryFor or longer, and returns their number. Called with s.mu held.
func (s *Store) expireResends(now time.Time) (gaveUp int64) {
	kept := s.resends[:0]
	for _, r := range s.resends {
		if now.Sub(r.firstSent) >= s.retryFor {
			gaveUp++
			continue
		}
		kept = append(kept, r)
	}
	clear(s.resends[len(kept):])
	s.resends = kept
	return gaveUp
}

// wakeForResends has the settle loop flush when settlements wait to be
// sent again: through a long outage of every node, that flush gives up
// those kept for retryFor (counted unanswered then, not once Redis is
// back), and sends nothing.
func (s *Store) wakeForResends() {
	s.mu.Lock()
	n := len(s.resends)
	s.mu.Unlock()
	if n > 0 {
		s.wake()
	}
}
