package simulator

import (
	"bytes"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// This file reads a request body as the service does. The service is
// FastAPI: Starlette's request.json() is Python's json.loads over the body's
// bytes, and a json.JSONDecodeError becomes one 422 error of type
// json_invalid whose loc holds the error's position and whose ctx holds its
// message. So the simulator cannot use encoding/json here: it reads neither
// NaN nor Infinity, accepts invalid UTF-8 inside strings, and words and
// places its errors its own way. What follows is Python's decoder (the C
// scanner that CPython uses, json/decoder.py in structure), step for step:
//
//   - the bytes are decoded first, as utf-8-sig with the surrogatepass error
//     handler: one leading byte order mark is dropped, UTF-8-encoded
//     surrogates (ED A0..BF xx) are read, and invalid UTF-8 anywhere fails
//     before any syntax is looked at;
//   - positions count characters of that decoded text, not bytes;
//   - NaN, Infinity and -Infinity are numbers; a repeated object key keeps
//     its first position and takes its last value (a dict built from the
//     pairs);
//   - messages are those of Python 3.12 and earlier (3.13 words a trailing
//     comma differently).
//
// Two choices follow the gateway's contract rather than Python, since there
// FastAPI answers 400 "There was an error parsing the body" instead of a 422
// (a body that is not JSON gets json_invalid): invalid UTF-8
// is json_invalid "Invalid UTF-8" at the first bad character, and nesting
// deeper than maxNesting (Python's recursion limit, about 1,000) is
// json_invalid "Maximum nesting depth exceeded" at the bracket too many.
//
// Decoded values are string, bool, nil, jsonNumber, nonFinite, []any and
// *jsonObject. A lone surrogate, escaped or encoded, becomes U+FFFD: a Go
// string cannot hold it, and Python could not write it back out either.

// maxNesting is the deepest nesting of arrays and objects read.
const maxNesting = 1000

// jsonNumber is a finite JSON number, kept as its text: an int to Python
// when it has no fraction and no exponent, a float otherwise.
type jsonNumber string

// nonFinite is one of Python's extra number words: NaN, Infinity, -Infinity.
type nonFinite string

// jsonObject is a decoded JSON object in the order Python's dict keeps.
type jsonObject struct {
	keys   []string
	values map[string]any
}

func newObject() *jsonObject { return &jsonObject{values: map[string]any{}} }

func (o *jsonObject) get(key string) (any, bool) {
	v, ok := o.values[key]
	return v, ok
}

// set adds key, or gives an existing key its new value in its old place.
func (o *jsonObject) set(key string, value any) *jsonObject {
	if _, ok := o.values[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.values[key] = value
	return o
}

// decodeError is Python's json.JSONDecodeError: a message and the position,
// in characters, where decoding stopped.
type decodeError struct {
	msg string
	pos int
}

// decodeBody decodes a request body as json.loads(body) does.
func decodeBody(body []byte) (any, *decodeError) {
	b := bytes.TrimPrefix(body, []byte("\xEF\xBB\xBF"))
	if bad := firstInvalidUTF8(b); bad >= 0 {
		return nil, &decodeError{"Invalid UTF-8", charIndex(b, bad)}
	}
	d := decoder{b: b}
	v, end, err := d.value(d.space(0))
	if err == nil {
		if end = d.space(end); end < len(b) {
			err = d.fail("Extra data", end)
		}
	}
	return v, err
}

// firstInvalidUTF8 returns the offset of the first byte that Python's UTF-8
// decoder with surrogatepass refuses, or -1.
func firstInvalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r != utf8.RuneError || size > 1:
			i += size
		case encodedSurrogate(b[i:]):
			i += 3
		default:
			return i
		}
	}
	return -1
}

func encodedSurrogate(b []byte) bool {
	return len(b) >= 3 && b[0] == 0xED && b[1] >= 0xA0 && b[1] <= 0xBF && b[2] >= 0x80 && b[2] <= 0xBF
}

// charIndex turns a byte offset into UTF-8 text into a character position.
func charIndex(b []byte, offset int) int {
	n := 0
	for _, c := range b[:offset] {
		if c&0xC0 != 0x80 {
			n++
		}
	}
	return n
}

type decoder struct {
	b     []byte
	depth int
}

func (d *decoder) fail(msg string, offset int) *decodeError {
	return &decodeError{msg, charIndex(d.b, offset)}
}

func (d *decoder) space(i int) int {
	for i < len(d.b) && (d.b[i] == ' ' || d.b[i] == '\t' || d.b[i] == '\n' || d.b[i] == '\r') {
		i++
	}
	return i
}

func (d *decoder) word(i int, w string) bool {
	return bytes.HasPrefix(d.b[i:], []byte(w))
}

// value is scan_once: the value starting at i, and where it ends. Where no
// value starts, Python's StopIteration becomes "Expecting value" there.
func (d *decoder) value(i int) (any, int, *decodeError) {
	if i >= len(d.b) {
		return nil, i, d.fail("Expecting value", i)
	}
	switch {
	case d.b[i] == '"':
		return d.str(i)
	case d.b[i] == '{':
		return d.object(i)
	case d.b[i] == '[':
		return d.array(i)
	case d.word(i, "null"):
		return nil, i + 4, nil
	case d.word(i, "true"):
		return true, i + 4, nil
	case d.word(i, "false"):
		return false, i + 5, nil
	case d.word(i, "NaN"):
		return nonFinite("NaN"), i + 3, nil
	case d.word(i, "Infinity"):
		return nonFinite("Infinity"), i + 8, nil
	case d.word(i, "-Infinity"):
		return nonFinite("-Infinity"), i + 9, nil
	}
	return d.number(i)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number is _match_number: an optional minus, an integer part without
// leading zeros, then a fraction and an exponent only when digits follow.
func (d *decoder) number(i int) (any, int, *decodeError) {
	b, j := d.b, i
	if j < len(b) && b[j] == '-' {
		j++
	}
	digits := func() {
		for j < len(b) && isDigit(b[j]) {
			j++
		}
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case j < len(b) && isDigit(b[j]):
		digits()
	default:
		return nil, i, d.fail("Expecting value", i)
	}
	if j+1 < len(b) && b[j] == '.' && isDigit(b[j+1]) {
		j++
		digits()
	}
	if j+1 < len(b) && (b[j] == 'e' || b[j] == 'E') {
		k := j + 1
		if k+1 < len(b) && (b[k] == '+' || b[k] == '-') {
			k++
		}
		if k < len(b) && isDigit(b[k]) {
			j = k
			digits()
		}
	}
	return jsonNumber(b[i:j]), j, nil
}

// str is scanstring: the string whose opening quote is at i.
func (d *decoder) str(i int) (string, int, *decodeError) {
	b := d.b
	j := d.plain(i + 1)
	if j < len(b) && b[j] == '"' {
		return string(b[i+1 : j]), j + 1, nil // no escapes: the text is the bytes
	}
	// The raw text bounds the decoded one: one allocation for all of it.
	var out strings.Builder
	out.Grow(d.stringEnd(j) - i)
	out.Write(b[i+1 : j])
	for {
		switch {
		case j >= len(b):
			return "", j, d.fail("Unterminated string starting at", i)
		case b[j] == '"':
			return out.String(), j + 1, nil
		case b[j] < 0x20:
			return "", j, d.fail("Invalid control character at", j)
		case encodedSurrogate(b[j:]):
			out.WriteRune(utf8.RuneError)
			j += 3
		case b[j] != '\\':
			end := d.plain(j)
			out.Write(b[j:end])
			j = end
		case j+1 >= len(b):
			return "", j, d.fail("Unterminated string starting at", i)
		case b[j+1] != 'u':
			c, ok := simpleEscapes[b[j+1]]
			if !ok {
				return "", j, d.fail("Invalid \\escape", j)
			}
			out.WriteByte(c)
			j += 2
		default:
			// \uXXXX; Python wants a character after the four digits
			// (the closing quote at least) and reports the 'u'.
			u := j + 1
			r, ok := d.hex4(u)
			if !ok {
				return "", j, d.fail("Invalid \\uXXXX escape", u)
			}
			j = u + 5
			// A high surrogate joins a low one escaped right after it.
			if r >= 0xD800 && r <= 0xDBFF && j+6 < len(b) && b[j] == '\\' && b[j+1] == 'u' {
				r2, ok := d.hex4(j + 1)
				if !ok {
					return "", j, d.fail("Invalid \\uXXXX escape", j+1)
				}
				if r2 >= 0xDC00 && r2 <= 0xDFFF {
					r = utf16.DecodeRune(r, r2)
					j += 6
				}
			}
			out.WriteRune(r) // a lone surrogate is U+FFFD
		}
	}
}

// stringEnd returns where the string text from j ends, at its closing quote
// or at the end of the body.
func (d *decoder) stringEnd(j int) int {
	for j < len(d.b) && d.b[j] != '"' {
		if d.b[j] == '\\' {
			j++
		}
		j++
	}
	return min(j, len(d.b))
}

// plain returns where the run of string text from j that needs no decoding
// ends: at a quote, a backslash, a control character or an encoded surrogate.
func (d *decoder) plain(j int) int {
	b := d.b
	for j < len(b) && b[j] != '"' && b[j] != '\\' && b[j] >= 0x20 && !encodedSurrogate(b[j:]) {
		j++
	}
	return j
}

var simpleEscapes = map[byte]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// hex4 reads the four hex digits after the 'u' at u.
func (d *decoder) hex4(u int) (rune, bool) {
	if u+5 >= len(d.b) {
		return 0, false
	}
	var r rune
	for _, c := range d.b[u+1 : u+5] {
		switch {
		case isDigit(c):
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func (d *decoder) enter(i int) *decodeError {
	d.depth++
	if d.depth > maxNesting {
		return d.fail("Maximum nesting depth exceeded", i)
	}
	return nil
}

// object is JSONObject: the object whose '{' is at i.
func (d *decoder) object(i int) (any, int, *decodeError) {
	if err := d.enter(i); err != nil {
		return nil, i, err
	}
	defer func() { d.depth-- }()
	b, o := d.b, newObject()
	j := d.space(i + 1)
	if j < len(b) && b[j] == '}' {
		return o, j + 1, nil
	}
	for {
		if j >= len(b) || b[j] != '"' {
			return nil, j, d.fail("Expecting property name enclosed in double quotes", j)
		}
		key, end, err := d.str(j)
		if err != nil {
			return nil, end, err
		}
		if j = d.space(end); j >= len(b) || b[j] != ':' {
			return nil, j, d.fail("Expecting ':' delimiter", j)
		}
		v, end, err := d.value(d.space(j + 1))
		if err != nil {
			return nil, end, err
		}
		o.set(key, v)
		switch j = d.space(end); {
		case j < len(b) && b[j] == '}':
			return o, j + 1, nil
		case j >= len(b) || b[j] != ',':
			return nil, j, d.fail("Expecting ',' delimiter", j)
		}
		j = d.space(j + 1)
	}
}

// array is JSONArray: the array whose '[' is at i.
func (d *decoder) array(i int) (any, int, *decodeError) {
	if err := d.enter(i); err != nil {
		return nil, i, err
	}
	defer func() { d.depth-- }()
	b, items := d.b, []any{}
	j := d.space(i + 1)
	if j < len(b) && b[j] == ']' {
		return items, j + 1, nil
	}
	for {
		v, end, err := d.value(j)
		if err != nil {
			return nil, end, err
		}
		items = append(items, v)
		switch j = d.space(end); {
		case j < len(b) && b[j] == ']':
			return items, j + 1, nil
		case j >= len(b) || b[j] != ',':
			return nil, j, d.fail("Expecting ',' delimiter", j)
		}
		j = d.space(j + 1)
	}
}
