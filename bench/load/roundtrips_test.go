package main

import "testing"

// classify names a script by its first item's kind, whatever its keys.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"EVALSHA", "ab12", "1", "p{o}:b", "1", "a", "1", "9"}, "admit"},
		{[]string{"EVALSHA", "ab12", "1", "p{o}:b", "1", "x", "1", "9"}, "admit"},
		{[]string{"EVALSHA", "ab12", "4", "p{o}:b", "p{o}:budget:2026-11-25", "p{o}:budget:2026-11-26", "p{o}:budget:2026-11-27", "1", "a", "4", "14"}, "admit"},
		{[]string{"EVAL", "return", "1", "p{o}:b", "1", "l", "1", "11"}, "admit"},
		{[]string{"EVALSHA", "ab12", "2", "p{o}:b", "p{o}:budget:2026-11", "1", "s", "2", "11"}, "settle"},
		{[]string{"EVALSHA", "ab12", "1", "p{o}:b", "1", "h", "1", "2"}, "hold"},
		{[]string{"EVALSHA", "ab12", "1"}, "evalsha"},
		{[]string{"GET", "systemone:cache:x"}, "answer-get"},
		{[]string{"XADD", "q", "*"}, "xadd"},
	} {
		if got := classify(tc.args); got != tc.want {
			t.Errorf("classify(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}
