package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/systemone/systemone-gateway/internal/reviewapi"
)

// maxEntryBytes bounds the `/labels` lines of one entry held at once. An
// entry has one line per labelled question, a few hundred bytes each; the
// bound only keeps a wrong source from filling memory within one entry.
const maxEntryBytes = 16 << 20

// readLabels reads a `/labels` export, one entry at a time: it hands emit
// each entry's lines as soon as the next entry's first line is read, and
// holds nothing else, so its memory does not grow with the number of
// lines. The review API exports an entry's lines together, entries in
// stream id order; lines that break that order (an entry's lines apart,
// which would make a second call for it) are an error, as is a line that
// is not a `/labels` line. emit returns false to stop the reading. name is
// the source in messages.
func readLabels(body io.Reader, name string, emit func(labelled) bool) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var cur labelled
	var curID streamID
	held := 0
	num := 0
	for sc.Scan() {
		num++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var f struct {
			Entry    *string         `json:"entry"`
			Question *string         `json:"question"`
			Type     *string         `json:"type"`
			Label    json.RawMessage `json:"label"`
		}
		if err := json.Unmarshal(raw, &f); err != nil || f.Entry == nil || f.Question == nil || f.Type == nil || len(f.Label) == 0 {
			return fmt.Errorf("%s: line %d is not a /labels line (an object with entry, question, type and label)", name, num)
		}
		if *f.Entry != cur.entry || cur.entry == "" {
			id, ok := parseStreamID(*f.Entry)
			switch {
			case !ok:
				return fmt.Errorf("%s: line %d: entry %q is not a stream entry id", name, num, *f.Entry)
			case cur.entry != "" && !curID.before(id):
				return fmt.Errorf("%s: line %d: entry %s comes after entry %s: the review API exports an entry's lines together, in entry order", name, num, *f.Entry, cur.entry)
			}
			if cur.entry != "" && !emit(cur) {
				return nil
			}
			cur, curID, held = labelled{entry: *f.Entry}, id, 0
		}
		held += len(raw)
		if held > maxEntryBytes {
			cur.tooLarge, cur.lines = true, nil // counted as failed, read past
			continue
		}
		cur.lines = append(cur.lines, line{raw: bytes.Clone(raw), question: *f.Question, typ: *f.Type, label: f.Label})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%s: line %d is longer than %d bytes", name, num+1, maxLine)
		}
		return fmt.Errorf("%s: after line %d: %v", name, num, err)
	}
	if cur.entry != "" {
		emit(cur)
	}
	return nil
}

// streamID is a review stream entry id, <milliseconds>-<sequence>.
type streamID struct{ ms, seq uint64 }

func parseStreamID(s string) (streamID, bool) {
	msText, seqText, ok := strings.Cut(s, "-")
	if !ok {
		return streamID{}, false
	}
	ms, err1 := strconv.ParseUint(msText, 10, 64)
	seq, err2 := strconv.ParseUint(seqText, 10, 64)
	return streamID{ms, seq}, err1 == nil && err2 == nil
}

func (a streamID) before(b streamID) bool {
	return a.ms < b.ms || a.ms == b.ms && a.seq < b.seq
}

// storedRequest returns the stored request body of an entry: found is false when
// the entry has none (stored without include_content, or trimmed from the
// stream: 404). A body the review API returns as a JSON string (one that
// was not plain JSON when stored) is that string's text.
func storedRequest(ctx context.Context, review *reviewapi.Client, entry string) (request []byte, found bool, err error) {
	body, err := review.Open(ctx, reviewapi.JSON, "items", entry)
	if reviewapi.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer body.Close()
	raw, err := io.ReadAll(io.LimitReader(body, maxResponse+1))
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("reading GET items/%s: %v", entry, err)
	case len(raw) > maxResponse:
		return nil, false, fmt.Errorf("GET items/%s: answer over %d bytes", entry, maxResponse)
	}
	var it struct {
		Request json.RawMessage `json:"request"`
	}
	if err := json.Unmarshal(raw, &it); err != nil {
		return nil, false, fmt.Errorf("GET items/%s: not an Item", entry)
	}
	if len(it.Request) == 0 || string(it.Request) == "null" {
		return nil, false, nil
	}
	if it.Request[0] == '"' {
		var s string
		if err := json.Unmarshal(it.Request, &s); err != nil {
			return nil, false, fmt.Errorf("GET items/%s: unreadable request", entry)
		}
		return []byte(s), true, nil
	}
	return it.Request, true, nil
}
