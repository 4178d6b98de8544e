package rawjson

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestUnquote(t *testing.T) {
	for _, s := range []string{`""`, `"plain"`, `"a\"b\\c\/\b\f\n\r\t"`, `"\u4e2d\u6587"`, `"\ud83d\ude00"`, `"\ud800x"`, `"中文"`} {
		var want string
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatal(err)
		}
		if got := Unquote([]byte(s)); got != want {
			t.Errorf("Unquote(%s) = %q, want %q (encoding/json)", s, got, want)
		}
	}
	if got := Unquote([]byte("\"a\xffb\"")); got != "a\ufffdb" {
		t.Errorf("invalid UTF-8: %q", got)
	}
	if Unquote(nil) != "" || Unquote([]byte(`"`)) != "" {
		t.Error("short input")
	}
}

func TestEnds(t *testing.T) {
	b := []byte(` {"a":["x\"]",{"b":1}],"c":true} , 12.5e3]`)
	i := SkipSpace(b, 0)
	if end := ValueEnd(b, i); string(b[i:end]) != `{"a":["x\"]",{"b":1}],"c":true}` {
		t.Errorf("object: %s", b[i:end])
	}
	if end := StringEnd(b, 7); string(b[7:end]) != `"x\"]"` {
		t.Errorf("string: %s", b[7:end])
	}
	n := SkipSpace(b, SkipSpace(b, ValueEnd(b, i))+1) // past the comma
	if end := ValueEnd(b, n); string(b[n:end]) != "12.5e3" {
		t.Errorf("number: %s", b[n:end])
	}
	if At(b, len(b)) != 0 || ValueEnd(b, len(b)) != len(b) || !Plain([]byte("abc")) || Plain([]byte(`a\n`)) {
		t.Error("bounds or Plain")
	}
}

func TestMembers(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // key=value, raw
		ok   bool
	}{
		{` {"a": 1, "b" : [2, {"c":3}], "a":"x"} `, []string{`"a"=1`, `"b"=[2, {"c":3}]`, `"a"="x"`}, true},
		{`{}`, nil, true},
		{`[1]`, nil, false},
		{`{"a":1,}`, []string{`"a"=1`}, false},
		{`{"a" 1}`, nil, false},
		{`{"a":}`, nil, false},
		{`{"a":1 "b":2}`, []string{`"a"=1`}, false},
	} {
		var got []string
		ok := Members([]byte(tc.in), 0, func(k, v []byte) bool {
			got = append(got, string(k)+"="+string(v))
			return true
		})
		if ok != tc.ok || strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("Members(%q) = %v %q, want %v %q", tc.in, ok, got, tc.ok, tc.want)
		}
	}
	var n int
	if !Members([]byte(`{"a":1,"b":2,"c":3}`), 0, func(_, _ []byte) bool { n++; return n < 2 }) || n != 2 {
		t.Errorf("stopping early: %d calls", n)
	}
}
