package redisstore

import (
	"strconv"
	"strings"
	"testing"
)

// Every name the batch script's Lua leaves for the Go side is filled: a
// body, a kind or a constant forgotten would be a syntax error at the
// first call.
func TestBatchSourceFilled(t *testing.T) {
	src := batchSource()
	if i := strings.Index(src, "{{"); i >= 0 {
		t.Fatalf("the batch script holds an unfilled name: %q", src[i:min(len(src), i+40)])
	}
	for _, want := range []string{"bodies['" + string(kindSettle) + "']", "'PX', " + strconv.FormatInt(settledFor.Milliseconds(), 10), "local function servertime()", "local function exact(key, a)", "if kind == '" + string(kindExact) + "' then"} {
		if !strings.Contains(src, want) {
			t.Errorf("the batch script lacks %q", want)
		}
	}
}
