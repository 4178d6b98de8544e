package simulator

import (
	"strings"
	"testing"
)

// The simulator's reading of the seed on its own, without the gateway: each
// want is written from the seed, FastAPI and Python's json.

func TestDecodeBodyAsPython(t *testing.T) {
	for _, tc := range []struct {
		body, msg string
		pos       int
	}{
		{``, "Expecting value", 0},
		{` `, "Expecting value", 1},
		{`{"a":}`, "Expecting value", 5},
		{`{"a" 1}`, "Expecting ':' delimiter", 5},
		{`{"a":1 "b":2}`, "Expecting ',' delimiter", 7},
		{`{"a":1,}`, "Expecting property name enclosed in double quotes", 7},
		{`[1,]`, "Expecting value", 3},
		{`[1 2]`, "Expecting ',' delimiter", 3},
		{`{} {}`, "Extra data", 3},
		{`"abc`, "Unterminated string starting at", 0},
		{`["a", "b\`, "Unterminated string starting at", 6},
		{"[\"a\x1fb\"]", "Invalid control character at", 3},
		{`["\q"]`, "Invalid \\escape", 2},
		{`["\u00zz"]`, "Invalid \\uXXXX escape", 3},
		{`["\u0041`, "Invalid \\uXXXX escape", 3},
		{`-`, "Expecting value", 0},
		{`-a`, "Expecting value", 0},
		{`01`, "Extra data", 1},
		{`1.e5`, "Extra data", 1},
		{`1e+`, "Extra data", 1},
		{`nul`, "Expecting value", 0},
		{`NaNa`, "Extra data", 3},
		{`["中文", x]`, "Expecting value", 7},
		{"\xEF\xBB\xBF[x]", "Expecting value", 1},
		{"[\"\xED\xA0\x80\", x]", "Expecting value", 6},
		{"[\"ok\", \"\xC0\xAF\"]", "Invalid UTF-8", 8},
		{"[x, \"\xFF\"]", "Invalid UTF-8", 5},
		{strings.Repeat("[", 1001), "Maximum nesting depth exceeded", 1000},
	} {
		_, err := decodeBody([]byte(tc.body))
		if err == nil || err.msg != tc.msg || err.pos != tc.pos {
			t.Errorf("%q: %+v, want %q at %d", tc.body, err, tc.msg, tc.pos)
		}
	}

	v, err := decodeBody([]byte("\xEF\xBB\xBF" + `{"b":[NaN,-Infinity,1.5e3,"\u00e9\ud83d\ude00\ud800"],"a":null,"b":true}` + strings.Repeat("[", 0)))
	if err != nil {
		t.Fatal(err)
	}
	if got := pyRepr(v); got != `{'b': True, 'a': None}` {
		t.Errorf("repeated key: %s, want the first place and the last value", got)
	}
	v, _ = decodeBody([]byte(`[NaN,-Infinity,1.5e3,"\u00e9\ud83d\ude00\ud800",` + strings.Repeat("[", 999) + strings.Repeat("]", 999) + `]`))
	if got := pyRepr(v); !strings.HasPrefix(got, `[nan, -inf, 1500.0, 'é😀�', [[[`) {
		t.Errorf("values: %.60s", got)
	}
}

func TestPythonRepr(t *testing.T) {
	for text, want := range map[string]string{
		"0": "0", "-0": "0", "12345678901234567890123": "12345678901234567890123",
		"0.0": "0.0", "-0.0": "-0.0", "1.5": "1.5", "0.1": "0.1", "1e3": "1000.0",
		"1E15": "1000000000000000.0", "1e16": "1e+16", "1.5e16": "1.5e+16",
		"0.0001": "0.0001", "0.00001": "1e-05", "123456789012345678.0": "1.2345678901234568e+17",
		"1e999": "inf", "-1e999": "-inf", "1e-999": "0.0",
	} {
		if got := pyNumber(text); got != want {
			t.Errorf("str(%s) = %s, want %s", text, got, want)
		}
	}
	for s, want := range map[string]string{
		``:              `''`,
		`it's`:          `"it's"`,
		`"q" it's`:      `'"q" it\'s'`,
		"a\\b\t\n\r":    `'a\\b\t\n\r'`,
		"\x00\x1f\x7f":  `'\x00\x1f\x7f'`,
		"é\u00a0\u00ad": `'é\xa0\xad'`,
		"中\u2028\ufeff": `'中\u2028\ufeff'`,
		"😀\U000e0001":   `'😀\U000e0001'`,
	} {
		if got := pyReprString(s); got != want {
			t.Errorf("repr(%q) = %s, want %s", s, got, want)
		}
	}
}

func TestValidateRequestFromSeed(t *testing.T) {
	union := func(loc, input string) string {
		return `{"type":"string_type","loc":[` + loc + `,"str"],"msg":"Input should be a valid string","input":` + input + `},` +
			`{"type":"dict_type","loc":[` + loc + `,"dict[str,any]"],"msg":"Input should be a valid dictionary","input":` + input + `},` +
			`{"type":"list_type","loc":[` + loc + `,"list[any]"],"msg":"Input should be a valid list","input":` + input + `}`
	}
	for _, tc := range []struct{ name, body, want string }{
		{"valid", `{"model":"service-latest","state":{"a":[1]},"questions":{"n":{"type":"noul","instructions":null},"c":{"type":"choice","instructions":"x","criteria":{"a":null,"b":"B"}},"s":{"type":"score","instructions":["x"],"criteria":[null,"hi"]}}}`, ``},
		{"not an object", ` [1] `,
			`{"detail":[{"type":"model_attributes_type","loc":["body"],"msg":"Input should be a valid dictionary or object to extract fields from","input":[1]}]}`},
		{"missing fields", `{"x":1}`,
			`{"detail":[{"type":"missing","loc":["body","state"],"msg":"Field required","input":{"x":1}},{"type":"missing","loc":["body","questions"],"msg":"Field required","input":{"x":1}}]}`},
		// The seed types model as a string: null is refused (the gateway
		// forwards it, in doubt).
		{"null model", `{"state":"s","model":null,"questions":{}}`,
			`{"detail":[{"type":"string_type","loc":["body","model"],"msg":"Input should be a valid string","input":null}]}`},
		{"null choice instructions", `{"state":"s","questions":{"q":{"type":"choice","instructions":null,"criteria":{"a":null}}}}`,
			`{"detail":[` + union(`"body","questions","q","choice","instructions"`, `null`) + `]}`},
		{"type missing", `{"state":"s","questions":{"q":{"instructions":"x"}}}`,
			`{"detail":[{"type":"union_tag_not_found","loc":["body","questions","q"],"msg":"Unable to extract tag using discriminator 'type'","input":{"instructions":"x"},"ctx":{"discriminator":"'type'"}}]}`},
		{"type misspelled", `{"state":"s","questions":{"q":{"type":"yesno"}}}`,
			`{"detail":[{"type":"union_tag_invalid","loc":["body","questions","q"],"msg":"Input tag 'yesno' found using 'type' does not match any of the expected tags: 'noul', 'choice', 'score'","input":{"type":"yesno"},"ctx":{"discriminator":"'type'","tag":"yesno","expected_tags":"'noul', 'choice', 'score'"}}]}`},
		{"one tier", `{"state":"s","questions":{"q":{"type":"score","instructions":"x","criteria":["a"]}}}`,
			`{"detail":[{"type":"too_short","loc":["body","questions","q","score","criteria"],"msg":"List should have at least 2 items after validation, not 1","input":["a"],"ctx":{"field_type":"List","min_length":2,"actual_length":1}}]}`},
		{"NaN echoed as null", `{"state":NaN,"questions":{}}`,
			`{"detail":[` + union(`"body","state"`, `null`) + `]}`},
		{"not JSON", `{"state":"中文",}`,
			`{"detail":[{"type":"json_invalid","loc":["body",14],"msg":"JSON decode error","input":{},"ctx":{"error":"Expecting property name enclosed in double quotes"}}]}`},
		{"too many choices", choiceBody(256, false), `{"detail":"Too many choices. Must have at most 255 choices."}`},
		{"too many choices, other errors first", strings.Replace(choiceBody(256, false), `"state":"s"`, `"state":1`, 1),
			`{"detail":[` + union(`"body","state"`, `1`) + `]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got := validateRequest([]byte(tc.body))
			if string(got) != tc.want {
				t.Errorf("422 body\n %s\nwant\n %s", got, tc.want)
			}
		})
	}
}
