package evaluation

import (
	"encoding/binary"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds nesting. The upstream decodes with Python's json module,
// whose recursion limit (about 1000) makes deeper documents fail there too;
// the bound keeps the gateway's recursive scanner on a small stack.
const maxDepth = 1000

// Kinds of JSON values, as the scanner reports them.
const (
	kindObject byte = 'o'
	kindArray  byte = 'a'
	kindString byte = 's'
	kindNumber byte = 'n'
	kindBool   byte = 'b'
	kindNull   byte = 'z'
)

// syntaxError is where and why a body is not JSON, in the words Python's json
// module uses, since the upstream reports those in its 422 ctx.
type syntaxError struct {
	pos int
	msg string
}

// span is one scanned value: its kind, its bytes b[start:end], the number of
// direct members (object fields or array items) and the CJK text inside it.
type span struct {
	start, end int
	members    int
	cjkRunes   int64
	cjkBytes   int64
	// kind and the flags last, together: 48 bytes, which every value
	// scanned returns.
	kind    byte
	escaped bool // a string with backslash escapes
	// odd: an object or array with a direct member that is a number or a
	// boolean, which no text field (string, object, array or null) holds.
	odd bool
}

// scanner is a strict single-pass JSON scanner over a byte slice: it checks
// syntax and UTF-8 and counts CJK characters for the token estimate, without
// decoding or allocating. Callers walk objects and arrays through the
// object/array helpers and skip the rest with value.
type scanner struct {
	b     []byte
	pos   int
	depth int
	err   *syntaxError
	// cjkRunes and cjkBytes grow monotonically as strings are scanned; the
	// difference over a value is that value's CJK text.
	cjkRunes int64
	cjkBytes int64
	// nonFinite is set when NaN or Infinity appeared: valid for Python, not
	// for JSON encoders, so such input is never echoed back verbatim.
	nonFinite bool
}

func (s *scanner) fail(pos int, msg string) {
	if s.err == nil {
		s.err = &syntaxError{pos: pos, msg: msg}
	}
}

func (s *scanner) skipSpace() {
	for s.pos < len(s.b) {
		switch s.b[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// value scans any JSON value at the current position. visit, when non-nil,
// is called with the key of each member of an object value; it scans the
// member's value itself and returns true, or returns false to have it skipped.
func (s *scanner) value(visit func(key span) bool) span {
	s.skipSpace()
	start := s.pos
	runes, bytes := s.cjkRunes, s.cjkBytes
	sp := span{start: start}
	if s.pos >= len(s.b) {
		s.fail(s.pos, "Expecting value")
		sp.end = s.pos
		return sp
	}
	switch c := s.b[s.pos]; {
	case c == '{':
		sp.kind = kindObject
		sp.members, sp.odd = s.object(visit)
	case c == '[':
		sp.kind = kindArray
		sp.members, sp.odd = s.array()
	case c == '"':
		sp.kind = kindString
		sp.escaped = s.str()
	case c == '-' || (c >= '0' && c <= '9'):
		sp.kind = kindNumber
		s.number()
	case c == 't':
		sp.kind = kindBool
		s.literal("true")
	case c == 'f':
		sp.kind = kindBool
		s.literal("false")
	case c == 'n':
		sp.kind = kindNull
		s.literal("null")
	case c == 'N':
		// Python's json accepts NaN and Infinity; so must the edge.
		sp.kind = kindNumber
		s.literal("NaN")
		s.nonFinite = true
	case c == 'I':
		sp.kind = kindNumber
		s.literal("Infinity")
		s.nonFinite = true
	default:
		s.fail(s.pos, "Expecting value")
	}
	sp.end = s.pos
	sp.cjkRunes, sp.cjkBytes = s.cjkRunes-runes, s.cjkBytes-bytes
	return sp
}

func (s *scanner) literal(word string) {
	if len(s.b)-s.pos >= len(word) && string(s.b[s.pos:s.pos+len(word)]) == word {
		s.pos += len(word)
		return
	}
	s.fail(s.pos, "Expecting value")
}

func (s *scanner) number() {
	b, i := s.b, s.pos
	if b[i] == '-' {
		i++
		if len(b)-i >= 8 && string(b[i:i+8]) == "Infinity" {
			s.pos = i + 8
			s.nonFinite = true
			return
		}
	}
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		s.fail(s.pos, "Expecting value")
		return
	}
	// A fraction or exponent that does not continue with digits ends the
	// number where Python's scanner ends it; what follows is then an error
	// of the enclosing structure, as there.
	if i+1 < len(b) && b[i] == '.' && b[i+1] >= '0' && b[i+1] <= '9' {
		i++
		digits()
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		j := i + 1
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if j < len(b) && b[j] >= '0' && b[j] <= '9' {
			i = j
			digits()
		}
	}
	s.pos = i
}

// str scans a string starting at its opening quote; it reports whether the
// string holds escapes.
func (s *scanner) str() (escaped bool) {
	b := s.b
	start := s.pos
	i := s.pos + 1
	// CJK text is counted in locals, the loop below runs once per
	// character; a string that fails leaves the counts, and the scan, moot.
	cjkRunes, cjkBytes := s.cjkRunes, s.cjkBytes
	for {
		// The hot loop: plain ASCII text, thirty-two bytes at a time, up
		// to the first byte that needs a closer look.
		i = plainText(b, i)
		if i >= len(b) {
			s.fail(start, "Unterminated string starting at")
			s.pos = len(b)
			return escaped
		}
		switch c := b[i]; {
		case c == '"':
			s.pos = i + 1
			s.cjkRunes, s.cjkBytes = cjkRunes, cjkBytes
			return escaped
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				s.fail(start, "Unterminated string starting at")
				s.pos = len(b)
				return escaped
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				// Python wants a character after the four digits (the
				// closing quote at least) and reports the 'u'.
				if i+6 >= len(b) || !isHex4(b[i+2:i+6]) {
					s.fail(i+1, "Invalid \\uXXXX escape")
					s.pos = len(b)
					return escaped
				}
				i += 6
			default:
				s.fail(i, "Invalid \\escape")
				s.pos = len(b)
				return escaped
			}
		case c < 0x20:
			s.fail(i, "Invalid control character at")
			s.pos = len(b)
			return escaped
		case isPlain3(b, i):
			// A run of three-byte characters, as CJK text is.
			for {
				if r := rune(b[i]&0x0F)<<12 | rune(b[i+1]&0x3F)<<6 | rune(b[i+2]&0x3F); isCJK(r) {
					cjkRunes++
					cjkBytes += 3
				}
				i += 3
				if !isPlain3(b, i) {
					break
				}
			}
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				if !isEncodedSurrogate(b[i:]) {
					s.fail(i, "Invalid UTF-8")
					s.pos = len(b)
					return escaped
				}
				size = 3
			}
			if isCJK(r) {
				cjkRunes++
				cjkBytes += int64(size)
			}
			i += size
		}
	}
}

// isPlain3 reports whether b[i:] starts with a three-byte character that is
// valid whatever its continuation bytes hold: lead bytes E1..EC and EE..EF
// (U+1000..U+CFFF, U+E000..U+FFFF), where no encoding is overlong or a
// surrogate. That covers the CJK blocks, kana, Hangul and full-width
// punctuation, decoded without utf8.DecodeRune's general checks.
func isPlain3(b []byte, i int) bool {
	if i+2 >= len(b) {
		return false
	}
	c := b[i]
	return (c >= 0xE1 && c <= 0xEC || c >= 0xEE && c <= 0xEF) && b[i+1]&0xC0 == 0x80 && b[i+2]&0xC0 == 0x80
}

// plainText returns the index of the first byte at or after i that ends
// a run of plain ASCII string text: a control byte, a byte of a multi-byte
// character, '"' or '\\'; len(b) when there is none. It reads eight
// bytes, then thirty-two at a time while it can, then eight, then one.
func plainText(b []byte, i int) int {
	rest := b[i:]
	// Most strings of JSON (keys, ids, types, numbers' names) end within
	// the first eight bytes.
	if len(rest) >= 8 {
		if m := special(binary.LittleEndian.Uint64(rest)) & highBits; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
		rest = rest[8:]
	}
	for len(rest) >= 32 {
		w0 := special(binary.LittleEndian.Uint64(rest))
		w1 := special(binary.LittleEndian.Uint64(rest[8:]))
		w2 := special(binary.LittleEndian.Uint64(rest[16:]))
		w3 := special(binary.LittleEndian.Uint64(rest[24:]))
		if (w0|w1|w2|w3)&highBits != 0 {
			break
		}
		rest = rest[32:]
	}
	for len(rest) >= 8 {
		if m := special(binary.LittleEndian.Uint64(rest)) & highBits; m != 0 {
			return len(b) - len(rest) + bits.TrailingZeros64(m)/8
		}
		rest = rest[8:]
	}
	for len(rest) > 0 && rest[0] >= 0x20 && rest[0] < 0x80 && rest[0] != '"' && rest[0] != '\\' {
		rest = rest[1:]
	}
	return len(b) - len(rest)
}

// Masks for special.
const (
	lowBits  = 0x0101010101010101
	highBits = 0x8080808080808080
)

// special finds the first byte of the eight in v (read little-endian from
// the body) that ends a run of plain ASCII string text: a control byte, a
// byte of a multi-byte character, '"' or '\\'. Masked with highBits, it
// has that byte's high bit set, and none of the bytes before it: lanes
// borrow only upward, and only from a lane that is such a byte. Each term
// flags its kinds (the bytes before the first are ASCII): a byte of 0x80
// and up (v itself); a byte below 0x20 or '"', the bytes that the XOR with
// 0x02 takes below 0x21 (0x22 becomes 0x20), so that the subtraction
// wraps; and '\\', which the XOR makes zero.
func special(v uint64) uint64 {
	return v | (v ^ lowBits*0x02 - lowBits*0x21) | (v ^ lowBits*'\\' - lowBits)
}

// isEncodedSurrogate reports a UTF-8 encoded UTF-16 surrogate (ED A0..BF xx),
// which Go rejects but Python decodes with the 'surrogatepass' handler its
// json module uses for bytes, so the upstream accepts it.
func isEncodedSurrogate(b []byte) bool {
	return len(b) >= 3 && b[0] == 0xED && b[1] >= 0xA0 && b[1] <= 0xBF && b[2] >= 0x80 && b[2] <= 0xBF
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func (s *scanner) enter() bool {
	s.depth++
	if s.depth > maxDepth {
		s.fail(s.pos, "Maximum nesting depth exceeded")
		return false
	}
	return true
}

// object scans an object and returns its member count, and whether a
// member's value is a number or a boolean. visit, when non-nil, gets each
// key and must scan the member's value (which odd then does not see);
// otherwise values are skipped.
func (s *scanner) object(visit func(key span) bool) (n int, odd bool) {
	if !s.enter() {
		return 0, false
	}
	defer func() { s.depth-- }()
	s.pos++ // '{'
	s.skipSpace()
	if s.pos < len(s.b) && s.b[s.pos] == '}' {
		s.pos++
		return 0, false
	}
	for s.err == nil {
		s.skipSpace()
		if s.pos >= len(s.b) || s.b[s.pos] != '"' {
			s.fail(s.pos, "Expecting property name enclosed in double quotes")
			return n, odd
		}
		key := span{kind: kindString, start: s.pos}
		key.escaped = s.str()
		key.end = s.pos
		s.skipSpace()
		if s.pos >= len(s.b) || s.b[s.pos] != ':' {
			s.fail(s.pos, "Expecting ':' delimiter")
			return n, odd
		}
		s.pos++
		if visit == nil || !visit(key) {
			odd = s.value(nil).scalar() || odd
		}
		n++
		if !s.next('}') {
			return n, odd
		}
	}
	return n, odd
}

// scalar reports a number or a boolean.
func (sp span) scalar() bool { return sp.kind == kindNumber || sp.kind == kindBool }

// array scans an array and returns its item count, and whether an item is
// a number or a boolean.
func (s *scanner) array() (n int, odd bool) {
	if !s.enter() {
		return 0, false
	}
	defer func() { s.depth-- }()
	s.pos++ // '['
	s.skipSpace()
	if s.pos < len(s.b) && s.b[s.pos] == ']' {
		s.pos++
		return 0, false
	}
	for s.err == nil {
		odd = s.value(nil).scalar() || odd
		n++
		if !s.next(']') {
			return n, odd
		}
	}
	return n, odd
}

// next reads what follows a member or an item: a comma (true: another one
// comes) or the closing bracket (false: the container ended). Anything
// else, or the end of the body, fails as Python's decoder does. It returns
// false at once after an earlier error.
func (s *scanner) next(closing byte) bool {
	if s.err != nil {
		return false
	}
	s.skipSpace()
	switch {
	case s.pos >= len(s.b):
	case s.b[s.pos] == ',':
		s.pos++
		return true
	case s.b[s.pos] == closing:
		s.pos++
		return false
	}
	s.fail(s.pos, "Expecting ',' delimiter")
	return false
}

// text returns the string value of a string span: a sub-slice of the body
// when it has no escapes, a decoded copy otherwise.
func (s *scanner) text(sp span) string {
	raw := s.b[sp.start+1 : sp.end-1]
	if !sp.escaped {
		return string(raw)
	}
	return unescape(raw)
}

// typeName returns the text of a string span that names a question type:
// the Type constant itself for the three the service defines (no copy: every
// question and answer has one), a decoded copy for anything else.
func (s *scanner) typeName(sp span) string {
	if !sp.escaped {
		switch string(s.b[sp.start+1 : sp.end-1]) {
		case TypeNoul:
			return TypeNoul
		case TypeChoice:
			return TypeChoice
		case TypeScore:
			return TypeScore
		}
	}
	return s.text(sp)
}

// keyIs reports whether a key span spells name (keys with escapes are decoded).
func (s *scanner) keyIs(key span, name string) bool {
	if !key.escaped {
		return string(s.b[key.start+1:key.end-1]) == name
	}
	return unescape(s.b[key.start+1:key.end-1]) == name
}

// appendText appends the decoded text of a string span to out; a span
// that is no string appends nothing.
func (s *scanner) appendText(out []byte, sp span) []byte {
	if sp.kind != kindString {
		return out
	}
	raw := s.b[sp.start+1 : sp.end-1]
	if !sp.escaped {
		return append(out, raw...)
	}
	return appendUnescaped(out, raw)
}

// textLen is the length of what appendText appends for sp.
func (s *scanner) textLen(sp span) int {
	switch {
	case sp.kind != kindString:
		return 0
	case !sp.escaped:
		return sp.end - sp.start - 2
	}
	var buf [64]byte
	return len(appendUnescaped(buf[:0], s.b[sp.start+1:sp.end-1]))
}

// unescape decodes the inside of a JSON string that the scanner accepted.
func unescape(raw []byte) string {
	return string(appendUnescaped(make([]byte, 0, len(raw)), raw))
}

// appendUnescaped appends the decoded inside of a JSON string that the
// scanner accepted to out.
func appendUnescaped(out []byte, raw []byte) []byte {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := rune(hex4(raw[i+1 : i+5]))
			i += 4
			// A high surrogate followed by a low one is one character.
			if utf16.IsSurrogate(r) && i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if pair := utf16.DecodeRune(r, rune(hex4(raw[i+3:i+7]))); pair != utf8.RuneError {
					r = pair
					i += 6
				}
			}
			out = utf8.AppendRune(out, r)
		default: // '"', '\\', '/'
			out = append(out, raw[i])
		}
	}
	return out
}

func hex4(b []byte) uint64 {
	v, _ := strconv.ParseUint(string(b), 16, 32)
	return v
}

// isCJK reports the characters a CJK tokenizer spends about one token on:
// Han, kana, Hangul, CJK punctuation and full-width forms.
func isCJK(r rune) bool {
	switch {
	case r < 0x2E80:
		return false
	case r <= 0x9FFF, // radicals, CJK punctuation, kana, Han (incl. extension A)
		0xAC00 <= r && r <= 0xD7AF,   // Hangul syllables
		0xF900 <= r && r <= 0xFAFF,   // compatibility ideographs
		0xFE30 <= r && r <= 0xFE4F,   // compatibility forms
		0xFF00 <= r && r <= 0xFFEF,   // half- and full-width forms
		0x20000 <= r && r <= 0x3FFFF: // Han extensions B..H
		return true
	}
	return false
}

// Valid reports whether b is one JSON value as the upstream's decoder reads
// JSON: RFC 8259 plus NaN, Infinity and -Infinity, UTF-8 (encoded
// surrogates included), nesting at most 1,000 deep.
func Valid(b []byte) bool {
	s := scanner{b: b}
	s.document(nil)
	return s.err == nil
}

// document scans a whole body: one value, then nothing but white space.
func (s *scanner) document(visit func(key span) bool) span {
	root := s.value(visit)
	if s.err == nil {
		s.skipSpace()
		if s.pos < len(s.b) {
			s.fail(s.pos, "Extra data")
		}
	}
	return root
}
