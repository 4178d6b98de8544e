package simulator

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/systemone/systemone-gateway/bench/payload"
)

// referenceMembers and referenceCountTokens read JSON with encoding/json's
// Decoder, as the simulator did before rawjson.go: the walker must read
// exactly what they read.
func referenceMembers(raw json.RawMessage) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errNotObject
	}
	var ms []member
	index := make(map[string]int)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		if i, ok := index[key]; ok {
			ms[i].value = value
			continue
		}
		index[key] = len(ms)
		ms = append(ms, member{key, value})
	}
	return ms, nil
}

func referenceCountTokens(value json.RawMessage) int64 {
	if len(value) == 0 {
		return 0
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	var n int64
	for {
		tok, err := dec.Token()
		if err != nil {
			return n
		}
		switch v := tok.(type) {
		case string:
			n += textTokens(v)
		case json.Number:
			n += textTokens(v.String())
		case bool:
			n++
		}
	}
}

// compareWalk checks members and countTokens against the references on an
// object and, recursively, on the objects inside it.
func compareWalk(t *testing.T, raw json.RawMessage, depth int) {
	got, err := members(raw)
	want, wantErr := referenceMembers(raw)
	if (err != nil) != (wantErr != nil) || !reflect.DeepEqual(got, want) {
		t.Fatalf("members(%.200q) = %q, %v\nreference %q, %v", raw, got, err, want, wantErr)
	}
	for _, m := range got {
		if n, want := countTokens(m.value), referenceCountTokens(m.value); n != want {
			t.Fatalf("countTokens(%.200q) = %d, reference %d", m.value, n, want)
		}
		if depth < 3 && bytes.HasPrefix(bytes.TrimSpace(m.value), []byte("{")) {
			compareWalk(t, m.value, depth+1)
		}
	}
}

// FuzzRawJSON: on every body the gateway's parser accepts, the simulator's
// walker reads the members and counts the tokens encoding/json does.
func FuzzRawJSON(f *testing.F) {
	for _, p := range payload.All() {
		if p.Size == payload.Small {
			f.Add(p.Body)
		}
	}
	for _, seed := range []string{
		`{"state":"s","questions":{"q":{"type":"noul","instructions":"x"}}}`,
		`{"state":{"a":[1,2.5e3,true,null,"x y"]},"questions":{"c":{"type":"choice","instructions":null,"criteria":{"a":null,"b":"B"}}}}`,
		`{"state":"esc \" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00 \ud800 x","questions":{"k\u00e9y":{"type":"noul","instructions":"i"}}}`,
		"{\"state\":\"surrogate \xed\xa0\x80 pass\",\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"\xed\xa0\x80\"}}}",
		`{"state":[NaN,-Infinity,Infinity],"questions":{},"questions":{"a":{"type":"score","instructions":"x","criteria":["1","2"]},"a":{"type":"noul","instructions":"y"}}}`,
		"\xEF\xBB\xBF { \"state\" : \"bom\" , \"questions\" : { } } ",
		`{"state":"中文，标点。","questions":{"問":{"type":"noul","instructions":"是否？"}}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, invalid := validateRequest(body); invalid != nil {
			return
		}
		compareWalk(t, standardJSON(body), 0)
	})
}

// TestSeedsReadOnce: a question's seed is the SHA-256 of all four parts,
// length-prefixed, as hashing them anew per question gives it: the state is
// hashed once per request, and the answers are the same as before (for a
// body without insignificant white space, which is not hashed).
func TestSeedsReadOnce(t *testing.T) {
	version, state := "service-1.0.0", []byte(`"the state"`)
	s := newSeeder(version, state)
	for _, q := range []question{
		{id: "q1", raw: json.RawMessage(`{"type":"noul", "instructions":"x"}`)},
		{id: "q2", raw: json.RawMessage(`{"type":"score","instructions":"y","criteria":["a","b"]}`)},
	} {
		q.canon = compact(q.raw) // seeded without white space
		h := sha256.New()
		for _, part := range [][]byte{[]byte(version), state, []byte(q.id), compact(q.raw)} {
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(len(part)))
			h.Write(n[:])
			h.Write(part)
		}
		sum := h.Sum(nil)
		want := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])))
		got := s.rand(q)
		for range 4 {
			if g, w := got.Uint64(), want.Uint64(); g != w {
				t.Fatalf("question %s: seeded stream %d, want %d", q.id, g, w)
			}
		}
	}
}
