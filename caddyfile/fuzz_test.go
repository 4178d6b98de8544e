package caddyfile

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/systemone/systemone-gateway/handlers"
)

// FuzzUnmarshal: the systemone directive's parser never panics, and
// whatever it accepts is JSON (what `caddy adapt` writes and Caddy loads)
// that decodes back, with no unknown field, into the same handler config.
// Seeds: testdata/fuzz/FuzzUnmarshal.
func FuzzUnmarshal(f *testing.F) {
	f.Fuzz(func(t *testing.T, input string) {
		// caddyfile.NewTestDispenser log.Fatal()s on input the lexer
		// refuses (which would end the fuzzer); the adapter tokenizes
		// first and reports such input as an error, and so does this.
		tokens, err := caddyfile.Tokenize([]byte(input), "Caddyfile")
		if err != nil {
			return
		}
		h := new(handlers.Handler)
		if err := Unmarshal(caddyfile.NewDispenser(tokens), h); err != nil {
			return
		}
		adapted, err := json.Marshal(h)
		if err != nil {
			t.Fatalf("accepted, but not JSON: %v\n%s", err, input)
		}
		dec := json.NewDecoder(bytes.NewReader(adapted))
		dec.DisallowUnknownFields()
		var back handlers.Handler
		if err := dec.Decode(&back); err != nil {
			t.Fatalf("the adapted JSON does not load: %v\n%s", err, adapted)
		}
		if again, _ := json.Marshal(&back); !bytes.Equal(again, adapted) {
			t.Fatalf("the config changed on its way through JSON:\n%s\n%s", adapted, again)
		}
	})
}
