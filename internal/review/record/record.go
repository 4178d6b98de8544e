// Package record owns the formats the review loop's parts exchange: the
// review stream's entry and its content entry, written by the gateway's
// route queue (policy/route) and read by the review API
// (internal/review/api); the `/labels` line, written by the review API and
// read by `calibrate`, `verify` and `replay`; the stream entry id all of
// them order by; the header that marks a replayed request; and Agree, the
// one rule of whether a label agrees with the model's answer. Every writer and reader goes through these types, so
// a field is named in one place.
package record

import (
	"cmp"
	"strconv"
	"strings"
)

// HeaderReplay is the request header, with the value "1", that marks a
// request `replay` sends: the gateway routes it as any other, but neither
// queues nor audits it.
const HeaderReplay = "X-Systemone-Replay"

// ID is a Redis stream entry id, "<milliseconds>-<sequence>": the order in
// which entries were queued, fixed before any label exists.
type ID struct{ Ms, Seq uint64 }

// ParseID reads a full stream entry id such as "1764000000000-0": two
// unsigned decimal numbers (no sign) joined by "-".
func ParseID(s string) (ID, bool) {
	msText, seqText, ok := strings.Cut(s, "-")
	if !ok {
		return ID{}, false
	}
	// ParseUint in base 10 takes digits only: no sign, no underscore.
	ms, err1 := strconv.ParseUint(msText, 10, 64)
	seq, err2 := strconv.ParseUint(seqText, 10, 64)
	if err1 != nil || err2 != nil {
		return ID{}, false
	}
	return ID{ms, seq}, true
}

// String writes the id as the stream does.
func (id ID) String() string {
	return strconv.FormatUint(id.Ms, 10) + "-" + strconv.FormatUint(id.Seq, 10)
}

// Compare orders ids as the stream does: by milliseconds, then by
// sequence number (numerically, so "10-0" comes after "9-0").
func (id ID) Compare(other ID) int {
	return cmp.Or(cmp.Compare(id.Ms, other.Ms), cmp.Compare(id.Seq, other.Seq))
}
