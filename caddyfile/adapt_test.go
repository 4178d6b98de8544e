package caddyfile_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/systemone/systemone-gateway"
)

var update = flag.Bool("update", false, "rewrite the golden adapt files with the current output")

// TestAdapt adapts each testdata/adapt/*.txt Caddyfile (the part before a
// line of dashes) and compares the JSON, or the error with its file:line,
// to the part after it.
func TestAdapt(t *testing.T) {
	files, _ := filepath.Glob("../testdata/adapt/*.txt")
	if len(files) == 0 {
		t.Fatal("no golden files")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			input, want, ok := strings.Cut(string(data), "\n----------\n")
			if !ok {
				t.Fatal("no ---------- line")
			}
			adapter := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}
			out, _, err := adapter.Adapt([]byte(input), map[string]any{"filename": "Caddyfile"})
			var got string
			if err != nil {
				got = "error: " + err.Error() + "\n"
			} else {
				var buf bytes.Buffer
				if err := json.Indent(&buf, out, "", "\t"); err != nil {
					t.Fatal(err)
				}
				got = buf.String() + "\n"
			}
			if *update {
				if err := os.WriteFile(file, []byte(input+"\n----------\n"+got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != want {
				t.Errorf("adapted:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}
