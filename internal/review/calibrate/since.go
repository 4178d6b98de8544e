package calibrate

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/systemone/systemone-gateway/internal/review/record"
)

// --since: only the entries from a point of the review stream on, for
// example those queued after a guarantee alarm. The point is an entry id,
// or a time, which names the first id of its millisecond: a stream id is
// `<ms>-<seq>`, the Unix milliseconds at which Redis queued the entry, so
// a time compares against when the entry was queued (its id), never
// against a line's `ts`, which is when the label was stored.

// ParseSince reads a --since value: a stream entry id such as
// "1764000000000-0", or an RFC 3339 time such as "2026-01-02T15:04:05Z",
// which names the first id of its millisecond (fractions of a millisecond
// are dropped, so the entries of that millisecond are kept). A time before
// 1970 is refused. The error is one line naming the flag.
func ParseSince(s string) (EntryID, error) {
	if id, ok := record.ParseID(s); ok {
		return EntryID{Ms: id.Ms, Seq: id.Seq, Set: true}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return EntryID{}, fmt.Errorf("--since %q is neither an RFC 3339 time such as 2026-01-02T15:04:05Z nor an entry id such as 1764000000000-0", s)
	}
	ms := t.UnixMilli()
	if ms < 0 || t.Before(time.Unix(0, 0)) {
		return EntryID{}, fmt.Errorf("--since %q is before 1970: no stream entry is that old", s)
	}
	return EntryID{Ms: uint64(ms), Seq: 0, Set: true}, nil
}

// String writes the id as the stream does; "" when not set.
func (a EntryID) String() string {
	if !a.Set {
		return ""
	}
	return strconv.FormatUint(a.Ms, 10) + "-" + strconv.FormatUint(a.Seq, 10)
}

// Time is when the entry of the id was queued, to the millisecond.
func (a EntryID) Time() time.Time {
	return time.UnixMilli(int64(min(a.Ms, math.MaxInt64))).UTC()
}

// keepSince leaves in s.records only the records of entries at or after
// since, and returns those it took out (nil when since is not set), for
// the caller to put back after the calibration. A line without an entry
// id counts as older than every entry, so --since leaves it out. Run after
// dedupe: a copy after since of an answer first seen before it stays a
// copy, counted nowhere, rather than becoming the answer's first line.
func (s *Sample) keepSince(since EntryID) (before []compactLine) {
	if !since.Set {
		return nil
	}
	kept := make([]compactLine, 0, len(s.records))
	for _, r := range s.records {
		if r.is(hasEntry) && (EntryID{Ms: r.entryMs, Seq: r.entrySeq}).Compare(since) >= 0 {
			kept = append(kept, r)
		} else {
			before = append(before, r)
		}
	}
	s.records = kept
	return before
}

// sinceNote says what --since left out, for a person to read.
func sinceNote(since EntryID, before []compactLine) string {
	return fmt.Sprintf("--since %s (queued %s or later): %d lines of earlier entries left out",
		since, since.Time().Format(time.RFC3339Nano), len(before))
}
