package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/systemone/systemone-gateway/internal/review/client"
	"github.com/systemone/systemone-gateway/internal/review/record"
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
	var curID record.ID
	held := 0
	num := 0
	for sc.Scan() {
		num++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		rec, err := record.ParseLabel(raw)
		// A question not labelled yet, or of a passed entry, has no label
		// to score a new answer with, but stays in the sample: carried.
		carried := rec.Pending || rec.Pass
		switch {
		case err != nil:
			return fmt.Errorf("%s: line %d is not a /labels line: %v", name, num, err)
		case rec.Entry == "" || len(rec.Label) == 0 && !carried:
			return fmt.Errorf("%s: line %d is not a /labels line: replay needs its entry and label", name, num)
		}
		if rec.Entry != cur.entry || cur.entry == "" {
			id, _ := record.ParseID(rec.Entry) // ParseLabel checked it
			if cur.entry != "" && curID.Compare(id) >= 0 {
				return fmt.Errorf("%s: line %d: entry %s comes after entry %s: the review API exports an entry's lines together, in entry order", name, num, rec.Entry, cur.entry)
			}
			if cur.entry != "" && !emit(cur) {
				return nil
			}
			cur, curID, held = labelled{entry: rec.Entry}, id, 0
		}
		held += len(raw)
		if held > maxEntryBytes {
			cur.tooLarge, cur.lines, cur.carried = true, nil, nil // counted as failed, read past
			continue
		}
		l := line{raw: bytes.Clone(raw), question: rec.Question, typ: rec.Type, label: rec.Label, pass: rec.Pass,
			model: rec.Model, route: rec.Route, stage: rec.Stage}
		if carried {
			cur.carried = append(cur.carried, l)
		} else {
			cur.lines = append(cur.lines, l)
		}
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

// item is what replay reads of a stored entry: its request body, its
// reason and its questions' routes and reasons.
type item struct {
	request   []byte
	reason    string
	questions []record.Question
}

// storedItem returns the Item of an entry with its stored request body:
// found is false when the entry has none (stored without include_content,
// or trimmed from the stream: 404). A body the review API returns as a
// JSON string (one that was not plain JSON when stored) is that string's
// text.
func storedItem(ctx context.Context, review *client.Client, entry string) (it item, found bool, err error) {
	body, err := review.Open(ctx, client.JSON, "items", entry)
	if client.IsNotFound(err) {
		return item{}, false, nil
	}
	if err != nil {
		return item{}, false, err
	}
	defer body.Close()
	raw, err := io.ReadAll(io.LimitReader(body, maxResponse+1))
	switch {
	case err != nil:
		return item{}, false, fmt.Errorf("reading GET items/%s: %v", entry, err)
	case len(raw) > maxResponse:
		return item{}, false, fmt.Errorf("GET items/%s: answer over %d bytes", entry, maxResponse)
	}
	var got struct {
		Request   json.RawMessage   `json:"request"`
		Reason    string            `json:"reason"`
		Questions []record.Question `json:"questions"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		return item{}, false, fmt.Errorf("GET items/%s: not an Item", entry)
	}
	if len(got.Request) == 0 || string(got.Request) == "null" {
		return item{}, false, nil
	}
	it = item{request: got.Request, reason: got.Reason, questions: got.Questions}
	if got.Request[0] == '"' {
		var s string
		if err := json.Unmarshal(got.Request, &s); err != nil {
			return item{}, false, fmt.Errorf("GET items/%s: unreadable request", entry)
		}
		it.request = []byte(s)
	}
	return it, true, nil
}
