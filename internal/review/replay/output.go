package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/review/record"
)

// maxPending bounds the entries held back while no entry has answered
// yet (their lines wait for the version's concrete name): past it they
// are written under --model as given, so that memory stays flat when the
// upstream answers nothing at all.
const maxPending = 100

// failedFields are the members a failed entry's lines get, in the order a
// line lacking them gets them. request_id stays the original's: there is
// no new answer, and it keeps the failed entries' lines apart.
var failedFields = []string{"model", "confidence", "answer", "agree", "route"}

// failedValues: a disagreement at confidence 1 with no answer. A
// disagreement counts against a threshold when its confidence is at or
// above it, so at confidence 1 a failure counts against every threshold:
// however the upstream fails, and whatever its failures have to do with
// the content, they can only lower agreement, never raise a threshold's
// chance of being wrong.
var failedValues = map[string]json.RawMessage{
	"confidence": json.RawMessage("1"),
	"answer":     json.RawMessage("null"),
	"agree":      json.RawMessage("false"),
	"route":      json.RawMessage(strconv.Quote(record.RouteReplayFailed)),
}

// output writes a replay's lines in `/labels` order, the lines of the
// entries that failed and the carried lines (questions not labelled yet,
// passed entries) among them. Those are written under the concrete
// version the other entries were answered by (--model may be an alias
// such as service-preview, and a line filed under the alias would fall
// out of the version's group): they wait in held until the first answer
// names the version, or until maxPending entries wait.
type output struct {
	out io.Writer
	log io.Writer
	// requested is --model; model the concrete version, once known.
	requested, model string
	// extra are the fields every line written gets too (--escalate's).
	extra *lineFields
	held  []heldEntry
	// err is the first write error; nothing is written after it.
	err error
}

// heldEntry is an entry whose lines wait for the version's name.
type heldEntry struct {
	e      labelled
	failed bool
}

// answered notes the concrete version of an answer: the first one names
// the version the held entries are written under.
func (o *output) answered(model string) {
	if o.model == "" && model != "" {
		o.flush(model)
	}
}

// hold writes, or holds back until the version is known, the lines of e
// that are not replayed answers: each labelled question as a
// disagreement when the entry failed, and its carried lines.
func (o *output) hold(e labelled, failed bool) {
	if e.tooLarge {
		fmt.Fprintf(o.log, "entry %s: its lines were too large to keep, so none is written for it\n", e.entry)
		return
	}
	if !failed && len(e.carried) == 0 {
		return
	}
	if o.model == "" {
		o.held = append(o.held, heldEntry{e, failed})
		if len(o.held) < maxPending {
			return
		}
		fmt.Fprintf(o.log, "note: the first %d entries were not answered: their lines are written under --model %s as given (if it is an alias, give the concrete version)\n", maxPending, o.requested)
		o.flush(o.requested)
		return
	}
	o.writeHeld(heldEntry{e, failed})
}

// flush sets the version held entries are written under, if not yet
// set, and writes them.
func (o *output) flush(model string) {
	if o.model == "" {
		o.model = model
	}
	for _, h := range o.held {
		o.writeHeld(h)
	}
	o.held = nil
}

func (o *output) writeHeld(h heldEntry) {
	if h.failed {
		o.write(failedLines(h.e, o.model, o.extra))
	}
	o.write(carriedLines(h.e, o.model, o.extra))
}

func (o *output) write(lines [][]byte) {
	for _, l := range lines {
		if o.err == nil {
			_, o.err = o.out.Write(append(l, '\n'))
		}
	}
}

// failedLines are a failed entry's lines as `calibrate` is to read them:
// each labelled question a disagreement of model at confidence 1, route
// RouteReplayFailed, with extra's fields, every other field as it was.
func failedLines(e labelled, model string, extra *lineFields) [][]byte {
	set := make(map[string]json.RawMessage, len(failedValues)+1)
	for k, v := range failedValues {
		set[k] = v
	}
	set["model"], _ = json.Marshal(model)
	lines := make([][]byte, 0, len(e.lines))
	for _, l := range e.lines {
		out, err := extra.rewrite(l.raw, failedFields, set)
		if err != nil {
			continue // ParseLabel read it as an object: unreachable
		}
		lines = append(lines, out)
	}
	return lines
}

// passValues: a passed entry's question, carried under the new version,
// is a disagreement at confidence 1 (calibrate reads a pass as a
// disagreement at its confidence): the new version was not asked, and at
// confidence 1 it counts against every threshold, so that passing hard
// entries cannot raise the replayed version's chance of a wrong
// threshold either.
var passValues = map[string]json.RawMessage{
	"confidence": json.RawMessage("1"),
	"answer":     json.RawMessage("null"),
	"route":      json.RawMessage(strconv.Quote(record.RouteReplay)),
}

// carriedFields are the members a carried line gets.
var carriedFields = []string{"model", "confidence", "answer", "route"}

// carriedLines are an entry's carried lines under model: a question not
// labelled yet keeps its entry, and every later one, out of the replayed
// version's complete prefix until it is labelled, as it does the
// original version's; a passed entry's questions count against every
// threshold (passValues). extra's fields are set too.
func carriedLines(e labelled, model string, extra *lineFields) [][]byte {
	version, _ := json.Marshal(model)
	lines := make([][]byte, 0, len(e.carried))
	for _, l := range e.carried {
		set := map[string]json.RawMessage{"model": version, "route": json.RawMessage(strconv.Quote(record.RouteReplay))}
		fields := []string{"model", "route"}
		if l.pass {
			for k, v := range passValues {
				set[k] = v
			}
			fields = carriedFields
		}
		out, err := extra.rewrite(l.raw, fields, set)
		if err != nil {
			continue // ParseLabel read it as an object: unreachable
		}
		lines = append(lines, out)
	}
	return lines
}

// estimate is a dry run's result for an entry whose request is body: one
// line naming the entry, its labelled questions and the input tokens the
// gateway would estimate for the request.
func estimate(e labelled, body []byte) result {
	req, err := evaluation.ParseRequest(body)
	if err != nil {
		return result{err: fmt.Errorf("the stored request is not one the service takes (%v): it would fail", err)}
	}
	line := fmt.Sprintf("entry %s questions %d tokens %d", e.entry, len(e.lines), req.EstimatedTokens)
	return result{tokens: req.EstimatedTokens, lines: [][]byte{[]byte(line)}}
}
