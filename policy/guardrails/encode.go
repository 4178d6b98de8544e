package guardrails

import "unicode/utf8"

// appendRequest appends the body of POST /v1/guardrails for msgs: the bytes
// json.Encoder writes for serviceRequest with SetEscapeHTML(false), written
// without reflection and with the messages' text copied in runs. A state of
// 256 KiB is one message of that size, encoded on every uncached check.
func appendRequest(b []byte, model string, msgs []Message) []byte {
	b = append(b, `{"model":`...)
	b = appendString(b, model)
	b = append(b, `,"messages":[`...)
	for i, m := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"role":`...)
		b = appendString(b, m.Role)
		b = append(b, `,"content":`...)
		b = appendString(b, m.Content)
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

// requestSize is the length appendRequest needs when nothing is escaped.
func requestSize(model string, msgs []Message) int {
	n := len(model) + 32
	for _, m := range msgs {
		n += len(m.Role) + len(m.Content) + 32
	}
	return n
}

// appendString appends s as encoding/json writes a string without HTML
// escaping: quotes, backslashes and control characters escaped, invalid
// UTF-8 as \ufffd, U+2028 and U+2029 as \u escapes.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		// Plain ASCII, eight bytes at a time.
		if i+8 <= len(s) && !special8(load64(s, i)) {
			i += 8
			continue
		}
		c := s[i]
		switch {
		case c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\':
			i++
			continue
		case c < utf8.RuneSelf:
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		case plain3(s, i):
			i += 3 // CJK text and most of the BMP: valid, nothing to escape
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// plain3 reports whether s[i:] starts with a three-byte character that is
// valid whatever its continuation bytes hold and never escaped: lead bytes
// E3..EC and EE..EF (U+3000..U+CFFF, U+E000..U+FFFF; E2 holds U+2028).
func plain3(s string, i int) bool {
	if i+2 >= len(s) {
		return false
	}
	c := s[i]
	return (c >= 0xE3 && c <= 0xEC || c >= 0xEE) && c <= 0xEF && s[i+1]&0xC0 == 0x80 && s[i+2]&0xC0 == 0x80
}

// load64 reads s[i:i+8] little-endian (one load on amd64 and arm64).
func load64(s string, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

// special8 reports whether any of the eight bytes in v is not plain ASCII
// string text: a control byte, a byte of a multi-byte character, '"' or
// '\\'. Each test is exact (see evaluation's scanner, which does the same).
func special8(v uint64) bool {
	const lowBits, highBits = 0x0101010101010101, 0x8080808080808080
	quote := v ^ (lowBits * '"')
	backslash := v ^ (lowBits * '\\')
	control := (v - lowBits*0x20) & ^v
	zeroQ := (quote - lowBits) & ^quote
	zeroB := (backslash - lowBits) & ^backslash
	return (v|control|zeroQ|zeroB)&highBits != 0
}
