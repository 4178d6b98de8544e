package simulator

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash"
	"math"
	"math/rand/v2"
	"strconv"
)

// evalRequest is what answering needs of an evaluation request, in the
// caller's order.
type evalRequest struct {
	state     json.RawMessage
	canon     []byte // state without insignificant white space: what answers are drawn from
	questions []question
}

type question struct {
	id    string
	raw   json.RawMessage // the question's JSON as sent
	canon []byte          // raw without insignificant white space: what answers are drawn from
	typ   string

	instructions json.RawMessage
	criteria     json.RawMessage
	options      []string          // choice: option keys
	tiers        []json.RawMessage // score: tier descriptions
}

func lookup(ms []member, key string) json.RawMessage {
	for _, m := range ms {
		if m.key == key {
			return m.value
		}
	}
	return nil
}

// parseEvaluation reads a body that validateRequest accepted. An error
// is a request the simulator cannot answer (a choice without options), or a
// disagreement with the validator on what a valid request is.
func parseEvaluation(body []byte) (*evalRequest, error) {
	top, err := members(standardJSON(body))
	if err != nil {
		return nil, fmt.Errorf("body: %w", err)
	}
	e := &evalRequest{state: lookup(top, "state")}
	e.canon = compact(e.state)
	var qs []member
	if raw := lookup(top, "questions"); raw != nil {
		if qs, err = members(raw); err != nil {
			return nil, fmt.Errorf("questions: %w", err)
		}
	}
	for _, m := range qs {
		fields, err := members(m.value)
		if err != nil {
			return nil, fmt.Errorf("question %q: %w", m.key, err)
		}
		q := question{
			id:           m.key,
			raw:          m.value,
			canon:        compact(m.value),
			instructions: lookup(fields, "instructions"),
			criteria:     lookup(fields, "criteria"),
		}
		if err := json.Unmarshal(lookup(fields, "type"), &q.typ); err != nil {
			return nil, fmt.Errorf("question %q: type is not a string", m.key)
		}
		switch q.typ {
		case typeNoul:
		case typeChoice:
			options, err := members(q.criteria)
			if err != nil || len(options) == 0 {
				return nil, fmt.Errorf("question %q: choice criteria holds no options", m.key)
			}
			for _, o := range options {
				q.options = append(q.options, o.key)
			}
		case typeScore:
			if err := json.Unmarshal(q.criteria, &q.tiers); err != nil || len(q.tiers) == 0 {
				return nil, fmt.Errorf("question %q: score criteria holds no tiers", m.key)
			}
		default:
			return nil, fmt.Errorf("question %q: unknown type %q", m.key, q.typ)
		}
		e.questions = append(e.questions, q)
	}
	return e, nil
}

var (
	utf8BOM = []byte{0xEF, 0xBB, 0xBF}
	// nonFiniteWords lists -Infinity before Infinity, so the longer one matches.
	nonFiniteWords = [][]byte{[]byte("-Infinity"), []byte("Infinity"), []byte("NaN")}
)

// standardJSON turns a body that Python's json reads, as the service does,
// into one encoding/json reads: without a UTF-8 byte order mark, and with the
// literals NaN, Infinity and -Infinity written as strings.
func standardJSON(body []byte) []byte {
	body = bytes.TrimPrefix(body, utf8BOM)
	if !bytes.Contains(body, []byte("NaN")) && !bytes.Contains(body, []byte("Infinity")) {
		return body
	}
	out := make([]byte, 0, len(body)+16)
	inString := false
next:
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case inString && c == '\\' && i+1 < len(body):
			out = append(out, c, body[i+1])
			i++
			continue
		case c == '"':
			inString = !inString
		case !inString:
			for _, lit := range nonFiniteWords {
				if bytes.HasPrefix(body[i:], lit) {
					out = append(append(append(out, '"'), lit...), '"')
					i += len(lit) - 1
					continue next
				}
			}
		}
		out = append(out, c)
	}
	return out
}

// answers returns the `answers` object for the version that answers. A
// question whose id is in confidences gets that noul or confidence; the
// others get the version's natural answer (SecondVersion's drawn against the
// truth, see truth.go).
func (e *evalRequest) answers(version string, confidences map[string]json.Number) json.RawMessage {
	var out object
	seeds := newSeeder(version, e.canon)
	var truths truthSource
	if version == SecondVersion {
		truths = newTruthSource(e.canon)
	}
	for _, q := range e.questions {
		rng := seeds.rand(q)
		target, targeted := confidences[q.id]
		if !targeted && version == SecondVersion {
			out.raw(q.id, secondAnswer(rng, q, truths.of(q)))
			continue
		}
		switch q.typ {
		case typeNoul:
			out.raw(q.id, noulAnswer(rng, target, targeted))
		case typeChoice:
			out.raw(q.id, choiceAnswer(rng, q.options, target, targeted))
		case typeScore:
			out.raw(q.id, scoreAnswer(rng, q.tiers, target, targeted))
		}
	}
	return out.bytes()
}

// compact is raw without insignificant white space, so that answers depend
// on the content and not on how it was spaced (the review API stores a
// request compacted, and replay sends it so); raw itself when it is not
// JSON that encoding/json reads.
func compact(raw []byte) []byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

// seeder seeds each answer from everything that defines it, so the same
// question over the same state and version always gets the same answer: the
// SHA-256 of the version, the state, the question id and the question's
// JSON (state and question without insignificant white space), each
// length-prefixed. The version and the state are hashed once per request;
// each question continues from a copy of that state.
type seeder struct {
	prefix hash.Hash
}

func newSeeder(version string, state []byte) seeder {
	h := sha256.New()
	writePart(h, []byte(version))
	writePart(h, state)
	return seeder{prefix: h}
}

func (s seeder) rand(q question) *rand.Rand {
	h, err := s.prefix.(hash.Cloner).Clone()
	if err != nil {
		panic(err) // SHA-256 always clones
	}
	writePart(h, []byte(q.id))
	writePart(h, q.canon)
	sum := h.Sum(nil)
	return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])))
}

func writePart(h hash.Hash, part []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(part)))
	h.Write(n[:])
	h.Write(part)
}

// clampTarget reads a requested value: the value limited to 0..1, and whether
// it was already inside. readControls checked that it parses.
func clampTarget(target json.Number) (float64, bool) {
	f, _ := strconv.ParseFloat(target.String(), 64)
	c := min(max(f, 0), 1)
	return c, c == f
}

func noulAnswer(rng *rand.Rand, target json.Number, targeted bool) []byte {
	var out object
	out.str("type", typeNoul)
	switch c, inside := clampTarget(target); {
	case !targeted:
		out.raw("noul", []byte(formatHundredths(naturalNoul(rng))))
	case inside:
		out.raw("noul", []byte(formatHundredths(int(math.Round(c*100)))))
	default:
		out.raw("noul", []byte(target.String()))
	}
	return out.bytes()
}

func choiceAnswer(rng *rand.Rand, options []string, target json.Number, targeted bool) []byte {
	n := len(options)
	var dist []int
	c, inside := clampTarget(target)
	if targeted {
		dist = distributionWithPeak(rng, n, peakForChoice(n, c))
	} else {
		dist = naturalDistribution(rng, n)
	}
	confidence := ""
	if targeted && !inside {
		confidence = target.String()
	}
	return renderChoice(options, dist, confidence)
}

// renderChoice writes a choice answer of the distribution; confidence
// overrides the derived one when not "".
func renderChoice(options []string, dist []int, confidence string) []byte {
	var probs object
	for i, key := range options {
		probs.raw(key, []byte(formatHundredths(dist[i])))
	}
	if confidence == "" {
		confidence = formatDerived(choiceConfidence(dist))
	}
	var out object
	out.str("type", typeChoice)
	out.str("choice", options[argmax(dist)])
	out.raw("probabilities", probs.bytes())
	out.raw("confidence", []byte(confidence))
	return out.bytes()
}

func scoreAnswer(rng *rand.Rand, tiers []json.RawMessage, target json.Number, targeted bool) []byte {
	n := len(tiers)
	var dist []int
	c, inside := clampTarget(target)
	if targeted {
		dist = distributionWithPeak(rng, n, peakForScore(n, c))
	} else {
		dist = naturalDistribution(rng, n)
	}
	confidence := ""
	if targeted && !inside {
		confidence = target.String()
	}
	return renderScore(tiers, dist, confidence)
}

// renderScore writes a score answer of the distribution; confidence
// overrides the peak when not "".
func renderScore(tiers []json.RawMessage, dist []int, confidence string) []byte {
	var legend, probs object
	for i, tier := range tiers {
		legend.str(strconv.Itoa(i), tierText(tier))
		probs.raw(strconv.Itoa(i), []byte(formatHundredths(dist[i])))
	}
	if confidence == "" {
		confidence = formatHundredths(dist[argmax(dist)])
	}
	var out object
	out.str("type", typeScore)
	out.raw("score", []byte(formatHundredths(scoreOf(dist))))
	out.raw("legend", legend.bytes())
	out.raw("probabilities", probs.bytes())
	out.raw("confidence", []byte(confidence))
	return out.bytes()
}

// tierText is a tier's description as the legend shows it: a string as
// itself, anything else (object, array, null) as compact JSON text.
func tierText(tier json.RawMessage) string {
	var s string
	if t := bytes.TrimSpace(tier); len(t) > 0 && t[0] == '"' && json.Unmarshal(t, &s) == nil {
		return s
	}
	var buf bytes.Buffer
	if json.Compact(&buf, tier) != nil {
		return string(tier) // not reached: the tier came out of a decoded body
	}
	return buf.String()
}

// object builds a JSON object whose members keep the order they are added
// in: answers follow the caller's question order, probabilities the caller's
// option order.
type object struct {
	b []byte
}

func (o *object) raw(key string, value []byte) {
	if o.b == nil {
		o.b = append(o.b, '{')
	} else {
		o.b = append(o.b, ',')
	}
	o.b = appendString(o.b, key)
	o.b = append(o.b, ':')
	o.b = append(o.b, value...)
}

func (o *object) str(key, value string) {
	o.raw(key, appendString(nil, value))
}

func (o *object) bytes() []byte {
	if o.b == nil {
		return []byte("{}")
	}
	return append(o.b, '}')
}

func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
