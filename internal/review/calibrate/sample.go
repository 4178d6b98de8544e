package calibrate

import (
	"cmp"
	"hash/maphash"
	"math"
	"slices"
	"strconv"

	"github.com/systemone/systemone-gateway/internal/review/record"
)

// RouteReplay is the `route` of a `/labels` line written by `replay`.
const RouteReplay = record.RouteReplay

// RouteReplayFailed is the `route` of a `/labels` line `replay` wrote for
// an entry that failed: read as a replayed line, a disagreement at
// confidence 1.
const RouteReplayFailed = record.RouteReplayFailed

// EntryID is a line's review stream entry id (record.ID): the order in
// which entries were queued, fixed before any label exists.
type EntryID struct {
	Ms, Seq uint64
	// Set is false for a line without an `entry` field.
	Set bool
}

// Compare orders entry ids as the stream does: by milliseconds, then by
// sequence number (numerically, so "10-0" comes after "9-0").
func (a EntryID) Compare(b EntryID) int {
	return cmp.Or(cmp.Compare(a.Ms, b.Ms), cmp.Compare(a.Seq, b.Seq))
}

// Sample is a set of `/labels` lines held as compact records: what the
// calibration reads of each line and nothing else (no text but the
// model, type and question names, held once each). ReadSample and
// Sample.AddFrom fill one a line at a time, so a large export costs the
// records only; Calibrate takes its lines through one.
//
// Lines with the same model, request_id and question are one line: the
// first by entry id, so that an answer repeated by the cache (the same
// request_id, a later entry) or a label exported twice counts once. Among
// the lines of one entry and question (an export holding a label and its
// correction), the label stored last (`ts`, then the later line) is the
// one kept: the labels as they are now.
type Sample struct {
	records   []compactLine
	names     []groupName
	nameIndex map[groupName]uint32
	draws     []Draw
	drawIndex map[Draw]uint32
	orgs      []string
	orgIndex  map[string]uint32
	// duplicates counts the lines dropped as duplicates so far.
	duplicates int
	// added counts the lines added, duplicates included: a line's place.
	added   int
	deduped bool
}

// groupName is a line's (model, type, question), held once per sample.
type groupName struct{ model, typ, question string }

// compactLine is one line as the calibration keeps it: 72 bytes.
type compactLine struct {
	entryMs, entrySeq uint64
	labelled          int64     // `ts`, ns since the epoch; 0 when unknown
	key               [2]uint64 // hash of (model, request_id, question)
	index             uint32    // the line's place in the input, renumbered by dedupe
	line              uint32    // the line's place in the input, kept
	org               uint32    // into Sample.orgs
	name              uint32    // into Sample.names
	draw              uint32    // into Sample.draws
	confidence        float64
	flags             recordFlags
}

type recordFlags uint16

const (
	hasConfidence recordFlags = 1 << iota
	agrees
	audited
	replayed
	hasEntry
	// unkeyed: no request_id and no entry to tell a copy by; never a
	// duplicate of anything.
	unkeyed
	// pending: a question not labelled yet (Line.Pending).
	pending
	// incomplete: a line of an entry that is not complete at the look
	// (Sample.markComplete).
	incomplete
	// routedAuto: the gateway routed the question auto (Line.Auto).
	routedAuto
)

// entryID writes the record's entry id as the stream does; "" without one.
func (r *compactLine) entryID() string {
	if !r.is(hasEntry) {
		return ""
	}
	return strconv.FormatUint(r.entryMs, 10) + "-" + strconv.FormatUint(r.entrySeq, 10)
}

func (r *compactLine) is(f recordFlags) bool { return r.flags&f != 0 }

// NewSample returns an empty sample.
func NewSample() *Sample {
	return &Sample{nameIndex: map[groupName]uint32{}, drawIndex: map[Draw]uint32{}, orgIndex: map[string]uint32{}}
}

// Lines is the number of lines held, duplicates dropped so far excluded.
func (s *Sample) Lines() int { return len(s.records) }

// Duplicates is the number of lines found to repeat another (same model,
// request_id and question) and counted once; it is complete once the
// sample has been calibrated.
func (s *Sample) Duplicates() int { return s.duplicates }

// seeds of the 128-bit duplicate key: two independent 64-bit hashes, so
// that two different lines share a key with a chance of about 2^-128 per
// pair.
var seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// Add adds one line.
func (s *Sample) Add(l Line) {
	if s.added == math.MaxUint32 {
		panic("calibrate: more than 4294967295 lines in one sample")
	}
	n := groupName{l.Model, l.Type, l.Question}
	ni, ok := s.nameIndex[n]
	if !ok {
		ni = uint32(len(s.names))
		s.names = append(s.names, n)
		s.nameIndex[n] = ni
	}
	di, ok := s.drawIndex[l.Draw]
	if !ok {
		di = uint32(len(s.draws))
		s.draws = append(s.draws, l.Draw)
		s.drawIndex[l.Draw] = di
	}
	oi, ok := s.orgIndex[l.Org]
	if !ok {
		oi = uint32(len(s.orgs))
		s.orgs = append(s.orgs, l.Org)
		s.orgIndex[l.Org] = oi
	}
	r := compactLine{
		entryMs: l.Entry.Ms, entrySeq: l.Entry.Seq, labelled: l.Labelled,
		index: uint32(s.added), line: uint32(s.added), name: ni, draw: di, org: oi, confidence: l.Confidence,
	}
	s.added++
	for _, f := range []struct {
		on   bool
		flag recordFlags
	}{{l.HasConfidence, hasConfidence}, {l.Agree, agrees}, {l.Audit, audited}, {l.Replay, replayed}, {l.Entry.Set, hasEntry}, {l.Pending, pending}, {l.Auto, routedAuto}} {
		if f.on {
			r.flags |= f.flag
		}
	}
	// The request id tells a copy; a line without one is told by its
	// entry (a line exported twice), and one without either by nothing.
	var identity [48]byte // "r" and the request id is hashed as it is
	var entry []byte
	switch {
	case l.RequestID != "":
	case l.Entry.Set:
		entry = append(identity[:0], 'e')
		entry = strconv.AppendUint(entry, l.Entry.Ms, 10)
		entry = append(entry, '-')
		entry = strconv.AppendUint(entry, l.Entry.Seq, 10)
	default:
		r.flags |= unkeyed
	}
	if !r.is(unkeyed) {
		for i := range r.key {
			var h maphash.Hash
			h.SetSeed(seeds[i])
			h.WriteString(l.Model)
			h.WriteByte(0)
			if entry != nil {
				h.Write(entry)
			} else {
				h.WriteByte('r')
				h.WriteString(l.RequestID)
			}
			h.WriteByte(0)
			h.WriteString(l.Question)
			r.key[i] = h.Sum64()
		}
	}
	s.records = append(s.records, r)
	s.deduped = false
}

// dedupe drops the duplicate lines: of the lines with one key, the first
// by entry id is kept, and of that entry's lines the one labelled last.
// The records are left in input order. One pass with a map from each key to
// the line kept so far: the least under dedupeOrder, a total order (the
// index breaks ties), so the line kept does not depend on the order the
// lines are met in.
func (s *Sample) dedupe() {
	if s.deduped {
		return
	}
	s.deduped = true
	byIndex := func(a, b compactLine) int { return cmp.Compare(a.index, b.index) }
	if !slices.IsSortedFunc(s.records, byIndex) { // a sample calibrated before, then added to
		slices.SortFunc(s.records, byIndex)
	}
	kept := make(map[[2]uint64]uint32, len(s.records))
	drop := make([]bool, len(s.records))
	for i := range s.records {
		r := &s.records[i]
		if r.is(unkeyed) {
			continue // never a duplicate of anything
		}
		j, ok := kept[r.key]
		switch {
		case !ok:
			kept[r.key] = uint32(i)
		case dedupeOrder(r, &s.records[j]) < 0:
			drop[j] = true
			kept[r.key] = uint32(i)
		default:
			drop[i] = true
		}
	}
	out := s.records[:0]
	for i, r := range s.records {
		if drop[i] {
			s.duplicates++
			continue
		}
		r.index = uint32(len(out))
		out = append(out, r)
	}
	s.records = out
}

// dedupeOrder orders the lines of one key, the one kept first: the first
// entry, then the latest label, then the later line.
func dedupeOrder(a, b *compactLine) int {
	return cmp.Or(
		cmp.Compare(a.entryMs, b.entryMs), cmp.Compare(a.entrySeq, b.entrySeq),
		cmp.Compare(b.labelled, a.labelled), // the latest label first
		cmp.Compare(b.index, a.index))       // then the later line
}
