package evaluation

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// referenceStr is str as written before its fast paths: byte by byte, every
// non-ASCII character through utf8.DecodeRune. It returns where the string
// ends (or where it fails), whether it failed, and its CJK counts.
func referenceStr(b []byte) (end int, failed bool, runes, size int64) {
	i := 1
	for i < len(b) {
		switch c := b[i]; {
		case c == '"':
			return i + 1, false, runes, size
		case c == '\\':
			if i+1 >= len(b) {
				return i, true, runes, size
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				// Python's decoder reports a bad escape at its u, and
				// wants something after the four digits (as CPython's
				// scanner does: `"\u1234` at the end is a bad escape).
				if i+6 >= len(b) || !isHex4(b[i+2:i+6]) {
					return i + 1, true, runes, size
				}
				i += 6
			default:
				return i, true, runes, size
			}
		case c < 0x20:
			return i, true, runes, size
		case c < 0x80:
			i++
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n <= 1 {
				if !isEncodedSurrogate(b[i:]) {
					return i, true, runes, size
				}
				n = 3
			}
			if isCJK(r) {
				runes++
				size += int64(n)
			}
			i += n
		}
	}
	return i, true, runes, size
}

// FuzzScanString: the fast paths of str (thirty-two and eight ASCII bytes
// at a time, runs of three-byte characters) accept, refuse and count exactly as the plain
// byte-by-byte scan does.
func FuzzScanString(f *testing.F) {
	for _, seed := range []string{
		`"plain ascii text that is longer than eight bytes"`,
		`"客户反映包裹比承诺的时间晚到了两天。“引号”，全角？"`,
		`"mixed 中文 and English, 한국어, カタカナ, ｆｕｌｌ"`,
		`"escapes \" \\ \n \u4e2d \ud83d\ude00 after"`,
		"\"control \x01 byte\"", "\"bad utf-8 \xff\"", "\"overlong \xe0\x80\x80\"",
		"\"surrogate \xed\xa0\x80 pass\"", "\"private use \xee\x80\x80 and \xef\xbf\xbf\"",
		"\"truncated \xe4\xb8", `"unterminated`, `"` + strings.Repeat("é", 20) + `"`,
		"\"7 bytes\"\"\x80\"", `"ends at 8"`,
		`"` + strings.Repeat("long plain text ", 8) + `\n` + strings.Repeat("more of it ", 6) + `\" quoted\" end"`,
		"\"" + strings.Repeat("thirty-two bytes of plain text. ", 3) + "\x01 control\"",
		"\"" + strings.Repeat("thirty-two bytes of plain text. ", 3) + "中文 after a long run\"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '"' {
			b = append([]byte{'"'}, b...)
		}
		s := scanner{b: b}
		s.str()
		wantEnd, wantFailed, wantRunes, wantSize := referenceStr(b)
		if failed := s.err != nil; failed != wantFailed {
			t.Fatalf("%q: failed %v (%v), reference %v", b, failed, s.err, wantFailed)
		}
		if !wantFailed && s.pos != wantEnd {
			t.Fatalf("%q: ends at %d, reference %d", b, s.pos, wantEnd)
		}
		if wantFailed && s.err.pos != wantEnd && s.err.pos != 0 {
			// The failure is reported where the reference stops, or at
			// the opening quote for an unterminated string.
			t.Fatalf("%q: fails at %d (%s), reference at %d", b, s.err.pos, s.err.msg, wantEnd)
		}
		if !wantFailed && (s.cjkRunes != wantRunes || s.cjkBytes != wantSize) {
			t.Fatalf("%q: CJK %d runes %d bytes, reference %d and %d", b, s.cjkRunes, s.cjkBytes, wantRunes, wantSize)
		}
	})
}

// TestPlainText: every byte that ends plain text is found where it is,
// at every offset of a long run (the thirty-two, eight and one byte
// paths, and every lane of a word), and a run without one is read whole.
func TestPlainText(t *testing.T) {
	const n = 80
	plain := []byte(strings.Repeat("plain text, 0-9 A-Z ~{}[]/", 4)[:n])
	if got := plainText(plain, 0); got != n {
		t.Fatalf("plain text ends at %d, want %d", got, n)
	}
	for c := 0x20; c < 0x80; c++ {
		run := []byte(strings.Repeat(string(rune(c)), n))
		if want := map[bool]int{true: 0, false: n}[c == '"' || c == '\\']; plainText(run, 0) != want {
			t.Errorf("a run of %q ends at %d, want %d", rune(c), plainText(run, 0), want)
		}
	}
	for at := range n {
		for c := range 256 {
			b := append([]byte(nil), plain...)
			b[at] = byte(c)
			want := n
			if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
				want = at
			}
			for _, from := range []int{0, at / 2, at} {
				if got := plainText(b, from); got != want {
					t.Fatalf("byte %#x at %d, from %d: ends at %d, want %d", c, at, from, got, want)
				}
			}
		}
	}
}
