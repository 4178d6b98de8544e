package simulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// This file writes decoded values back out: as JSON, for the inputs a 422
// echoes, and as Python's repr(), for a tag pydantic quotes in a message.
// The gateway's evaluation/pystr.go does the same for its own 422s, and the
// two are alike on purpose, not shared: the simulator is the independent
// upstream the gateway's answers are compared against, so a mistake in one
// must not pass in both.

// encodeJSON appends the JSON of a decoded value (or of an int, a loc
// index) to dst, compact and with object members in their decoded order, as
// the service's JSONResponse writes it. A number keeps the text it was sent
// with (Python would write 1e3 back as 1000.0: the same number).
func encodeJSON(dst []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...)
	case bool:
		return strconv.AppendBool(dst, v)
	case int:
		return strconv.AppendInt(dst, int64(v), 10)
	case jsonNumber:
		return append(dst, v...)
	case nonFinite:
		return append(dst, v...) // not reached: errorBody writes null instead
	case string:
		return appendJSONString(dst, v)
	case []any:
		dst = append(dst, '[')
		for i, item := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = encodeJSON(dst, item)
		}
		return append(dst, ']')
	case *jsonObject:
		dst = append(dst, '{')
		for i, k := range v.keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(appendJSONString(dst, k), ':')
			dst = encodeJSON(dst, v.values[k])
		}
		return append(dst, '}')
	}
	panic(fmt.Sprintf("simulator: cannot encode %T", v))
}

// appendJSONString writes s as a JSON string, non-ASCII text as itself
// (ensure_ascii=False).
func appendJSONString(dst []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}

// pyNumber is str() of the int or float Python reads a JSON number as.
func pyNumber(text string) string {
	if !strings.ContainsAny(text, ".eE") {
		if strings.Trim(text, "-0") == "" {
			return "0" // int("-0") is 0
		}
		return text
	}
	f, _ := strconv.ParseFloat(text, 64) // out of range: ±Inf, as float() gives
	return pyFloat(f)
}

// pyFloat is repr() of a float: the shortest digits that read back, in
// positional notation for decimal exponents -4 through 15 (with ".0" when
// whole), else in scientific notation with at least two exponent digits.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64)
	exp, _ := strconv.Atoi(sci[strings.IndexByte(sci, 'e')+1:])
	if exp < -4 || exp >= 16 {
		return sci
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// pyReprString is repr() of a str: single quotes unless the text holds a
// single quote and no double one; backslash escapes for the quote, the
// backslash, \t \n \r, and every character that is not printable.
func pyReprString(s string) string {
	quote := '\''
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		quote = '"'
	}
	var b strings.Builder
	b.WriteRune(quote)
	for _, r := range s {
		switch {
		case r == quote || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && r >= 0x20 && r != 0x7F, r >= 0x80 && unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xFF:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xFFFF:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteRune(quote)
	return b.String()
}
