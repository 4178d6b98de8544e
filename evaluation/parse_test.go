package evaluation

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// detail decodes a ValidationError body into its list of errors.
func detail(t *testing.T, err error) []map[string]any {
	t.Helper()
	ve, ok := err.(*ValidationError)
	if !ok {
		t.Fatalf("error %v (%T), want *ValidationError", err, err)
	}
	var body struct {
		Detail []map[string]any `json:"detail"`
	}
	if err := json.Unmarshal(ve.Body(), &body); err != nil {
		t.Fatalf("422 body is not the list form: %v\n%s", err, ve.Body())
	}
	return body.Detail
}

func locString(e map[string]any) string {
	b, _ := json.Marshal(e["loc"])
	return string(b)
}

func TestParseRequestAccepts(t *testing.T) {
	body := `{"model":"service-1.0.0","state":"The cat sat.","questions":{
		"b":{"type":"noul","instructions":"Is it a cat?","criteria":{"true":"yes"}},
		"a":{"type":"choice","instructions":{"q":"Which?"},"criteria":{"cat":null,"dog":"a dog"}},
		"c":{"type":"score","instructions":["rate"],"criteria":["low",null,{"x":1}]}}}`
	req, err := ParseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if req.Model != "service-1.0.0" || req.ModelOrDefault() != "service-1.0.0" {
		t.Errorf("model %q", req.Model)
	}
	if string(req.State) != `"The cat sat."` {
		t.Errorf("state %s", req.State)
	}
	want := []Question{{"b", TypeNoul}, {"a", TypeChoice}, {"c", TypeScore}}
	if fmt.Sprint(req.Questions) != fmt.Sprint(want) {
		t.Errorf("questions %v, want %v (body order)", req.Questions, want)
	}
	if req.EstimatedTokens <= 0 {
		t.Errorf("estimate %d", req.EstimatedTokens)
	}
}

// What client libraries send and the upstream accepts must pass the edge.
func TestParseRequestTolerance(t *testing.T) {
	for name, body := range map[string]string{
		"null instructions":        `{"state":"s","questions":{"q":{"type":"noul","instructions":null}}}`,
		"noul without criteria":    `{"state":"s","questions":{"q":{"type":"noul","instructions":"x"}}}`,
		"null noul criteria":       `{"state":"s","questions":{"q":{"type":"noul","instructions":"x","criteria":null}}}`,
		"null tiers":               `{"state":"s","questions":{"q":{"type":"score","instructions":"x","criteria":[null,null]}}}`,
		"null choice descriptions": `{"state":"s","questions":{"q":{"type":"choice","instructions":"x","criteria":{"a":null,"b":null}}}}`,
		"null model":               `{"state":"s","model":null,"questions":{}}`,
		"object state":             `{"state":{"messages":[{"role":"user","content":"hi"}]},"questions":{}}`,
		"array state":              `{"state":["a","b"],"questions":{}}`,
		"unknown fields":           `{"state":"s","questions":{},"extra":[1,2,{"x":NaN}],"n":-Infinity}`,
		"utf-8 BOM":                "\xEF\xBB\xBF" + `{"state":"s","questions":{}}`,
		"encoded surrogate":        `{"state":"` + "\xED\xA0\x80" + `","questions":{}}`,
		"255 choices":              choiceBody(255, false),
		"256 keys, 255 distinct":   choiceBody(256, true),
		"escaped keys":             `{"st\u0061te":"s","questions":{"\u4e2d":{"type":"noul","instructions":"x"}}}`,
		"10 tiers":                 `{"state":"s","questions":{"q":{"type":"score","instructions":"x","criteria":["0","1","2","3","4","5","6","7","8","9"]}}}`,
		"deep but allowed":         `{"state":` + strings.Repeat("[", 900) + strings.Repeat("]", 900) + `,"questions":{}}`,
		"numbers":                  `{"state":"s","questions":{},"x":[0,-0,1.5e3,-2E-2,10]}`,
	} {
		if _, err := ParseRequest([]byte(body)); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
}

func choiceBody(n int, duplicate bool) string {
	var b strings.Builder
	b.WriteString(`{"state":"s","questions":{"q":{"type":"choice","instructions":"x","criteria":{`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		key := i
		if duplicate && i == n-1 {
			key = 0
		}
		fmt.Fprintf(&b, `"opt%d":null`, key)
	}
	b.WriteString(`}}}}`)
	return b.String()
}

func TestParseRequestRejects(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		typ, loc   string
	}{
		{"missing state", `{"questions":{}}`, "missing", `["body","state"]`},
		{"missing questions", `{"state":"s"}`, "missing", `["body","questions"]`},
		{"not an object", `[1,2]`, "model_attributes_type", `["body"]`},
		{"questions a list", `{"state":"s","questions":[]}`, "dict_type", `["body","questions"]`},
		{"questions null", `{"state":"s","questions":null}`, "dict_type", `["body","questions"]`},
		{"state a number", `{"state":5,"questions":{}}`, "string_type", `["body","state","str"]`},
		{"model a number", `{"state":"s","model":5,"questions":{}}`, "string_type", `["body","model"]`},
		{"question a string", `{"state":"s","questions":{"q":"x"}}`, "model_attributes_type", `["body","questions","q"]`},
		{"type missing", `{"state":"s","questions":{"q":{"instructions":"x"}}}`, "union_tag_not_found", `["body","questions","q"]`},
		{"type misspelled", `{"state":"s","questions":{"q":{"type":"nul","instructions":"x"}}}`, "union_tag_invalid", `["body","questions","q"]`},
		{"instructions missing", `{"state":"s","questions":{"q":{"type":"noul"}}}`, "missing", `["body","questions","q","noul","instructions"]`},
		{"instructions a bool", `{"state":"s","questions":{"q":{"type":"noul","instructions":true}}}`, "string_type", `["body","questions","q","noul","instructions","str"]`},
		{"choice criteria missing", `{"state":"s","questions":{"q":{"type":"choice","instructions":"x"}}}`, "missing", `["body","questions","q","choice","criteria"]`},
		{"choice criteria a list", `{"state":"s","questions":{"q":{"type":"choice","instructions":"x","criteria":["a"]}}}`, "dict_type", `["body","questions","q","choice","criteria"]`},
		{"score criteria missing", `{"state":"s","questions":{"q":{"type":"score","instructions":"x"}}}`, "missing", `["body","questions","q","score","criteria"]`},
		{"score criteria an object", `{"state":"s","questions":{"q":{"type":"score","instructions":"x","criteria":{}}}}`, "list_type", `["body","questions","q","score","criteria"]`},
		{"one tier", `{"state":"s","questions":{"q":{"type":"score","instructions":"x","criteria":["a"]}}}`, "too_short", `["body","questions","q","score","criteria"]`},
		{"eleven tiers", `{"state":"s","questions":{"q":{"type":"score","instructions":"x","criteria":[1,2,3,4,5,6,7,8,9,10,11]}}}`, "too_long", `["body","questions","q","score","criteria"]`},
		{"odd id", `{"state":"s","questions":{"a,b=c d中":{"type":"x","instructions":"x"}}}`, "union_tag_invalid", `["body","questions","a,b=c d中"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRequest([]byte(tc.body))
			errs := detail(t, err)
			if len(errs) == 0 {
				t.Fatal("no errors")
			}
			if errs[0]["type"] != tc.typ || locString(errs[0]) != tc.loc {
				t.Errorf("first error %v at %s, want %s at %s", errs[0]["type"], locString(errs[0]), tc.typ, tc.loc)
			}
			for _, e := range errs {
				for _, field := range []string{"type", "loc", "msg", "input"} {
					if _, ok := e[field]; !ok {
						t.Errorf("error %v lacks %q", e, field)
					}
				}
			}
		})
	}
}

func TestParseRequestErrorDetails(t *testing.T) {
	_, err := ParseRequest([]byte(`{"state":"s","questions":{"q":{"type":"score","instructions":"x","criteria":["a"]}}}`))
	e := detail(t, err)[0]
	if e["msg"] != "List should have at least 2 items after validation, not 1" {
		t.Errorf("msg %q", e["msg"])
	}
	ctx, _ := json.Marshal(e["ctx"])
	if string(ctx) != `{"actual_length":1,"field_type":"List","min_length":2}` {
		t.Errorf("ctx %s", ctx)
	}
	if in, _ := json.Marshal(e["input"]); string(in) != `["a"]` {
		t.Errorf("input %s", in)
	}

	_, err = ParseRequest([]byte(`{"state":"s","questions":{"q":{"type":"nul","instructions":"x"}}}`))
	e = detail(t, err)[0]
	if e["msg"] != "Input tag 'nul' found using 'type' does not match any of the expected tags: 'noul', 'choice', 'score'" {
		t.Errorf("msg %q", e["msg"])
	}

	// Every error is reported, not just the first.
	_, err = ParseRequest([]byte(`{"questions":{"a":{"type":"noul"},"b":{"type":"score","instructions":"x","criteria":[]}}}`))
	if n := len(detail(t, err)); n != 3 {
		t.Errorf("%d errors, want 3 (state, a.instructions, b.criteria)", n)
	}
}

func TestParseRequestTooManyChoices(t *testing.T) {
	_, err := ParseRequest([]byte(choiceBody(256, false)))
	ve, ok := err.(*ValidationError)
	if !ok {
		t.Fatalf("error %v", err)
	}
	if string(ve.Body()) != `{"detail":"Too many choices. Must have at most 255 choices."}` {
		t.Errorf("body %s", ve.Body())
	}
}

func TestParseRequestNotJSON(t *testing.T) {
	for name, body := range map[string]string{
		"empty":               ``,
		"spaces":              "  \n",
		"truncated":           `{"state":"s","questions":{`,
		"truncated string":    `{"state":"s`,
		"trailing comma":      `{"state":"s",}`,
		"extra data":          `{"state":"s","questions":{}} x`,
		"single quotes":       `{'state':'s'}`,
		"invalid utf-8":       "{\"state\":\"\xff\xfe\",\"questions\":{}}",
		"control character":   "{\"state\":\"a\x01b\",\"questions\":{}}",
		"bad escape":          `{"state":"\x","questions":{}}`,
		"bad unicode escape":  `{"state":"\u12G4","questions":{}}`,
		"leading zero":        `{"state":"s","questions":{},"n":01}`,
		"too deep":            `{"state":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`,
		"bare word":           `hello`,
		"missing colon":       `{"state" "s"}`,
		"unterminated object": `{"state":"s","questions":{}`,
		"lone minus":          `{"n":-}`,
	} {
		_, err := ParseRequest([]byte(body))
		errs := detail(t, err)
		if len(errs) != 1 || errs[0]["type"] != "json_invalid" || errs[0]["msg"] != "JSON decode error" {
			t.Errorf("%s: %v, want one json_invalid", name, errs)
			continue
		}
		if loc := errs[0]["loc"].([]any); len(loc) != 2 || loc[0] != "body" {
			t.Errorf("%s: loc %v", name, loc)
		}
		if ctx, _ := errs[0]["ctx"].(map[string]any); ctx["error"] == "" {
			t.Errorf("%s: no ctx.error", name)
		}
	}
}

func TestParseRequestDuplicates(t *testing.T) {
	req, err := ParseRequest([]byte(`{"state":"a","state":"b","questions":{"x":{"type":"noul","instructions":"i"},"y":{"type":"noul","instructions":"i"},"x":{"type":"score","instructions":"i","criteria":["1","2"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(req.State) != `"b"` {
		t.Errorf("state %s, want the last one", req.State)
	}
	if fmt.Sprint(req.Questions) != "[{x score} {y noul}]" {
		t.Errorf("questions %v, want x first with its last value", req.Questions)
	}
	var many strings.Builder
	many.WriteString(`{"state":"a","questions":{`)
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&many, `"q%d":{"type":"noul","instructions":"i"},`, i%20)
	}
	many.WriteString(`"last":{"type":"noul","instructions":"i"}}}`)
	req, err = ParseRequest([]byte(many.String()))
	if err != nil || len(req.Questions) != 21 {
		t.Fatalf("%v, %d questions, want 21", err, len(req.Questions))
	}
}

func TestParseRequestUnescapes(t *testing.T) {
	req, err := ParseRequest([]byte(`{"state":"s","model":"service-\u0031.0.0","questions":{"\ud83d\ude00 a\"b":{"type":"n\u006ful","instructions":"x"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Model != "service-1.0.0" || req.Questions[0].ID != "😀 a\"b" || req.Questions[0].Type != TypeNoul {
		t.Errorf("got %q %+v", req.Model, req.Questions)
	}
}

func TestEstimatedTokens(t *testing.T) {
	english := strings.Repeat("word ", 400) // 2000 bytes
	chinese := strings.Repeat("中文", 500)    // 1000 characters
	for _, tc := range []struct {
		state    string
		min, max int64
	}{
		{english, 480, 540},
		{chinese, 1000, 1010},
	} {
		body, _ := json.Marshal(map[string]any{"state": tc.state, "questions": map[string]any{"q": map[string]any{"type": "noul", "instructions": "ok?"}}})
		req, err := ParseRequest(body)
		if err != nil {
			t.Fatal(err)
		}
		if req.EstimatedTokens < tc.min || req.EstimatedTokens > tc.max {
			t.Errorf("estimate %d for %.10q..., want %d..%d", req.EstimatedTokens, tc.state, tc.min, tc.max)
		}
	}
	// The state is counted once, whatever the number of questions.
	one, _ := ParseRequest([]byte(`{"state":"` + english + `","questions":{"a":{"type":"noul","instructions":"x"}}}`))
	two, _ := ParseRequest([]byte(`{"state":"` + english + `","questions":{"a":{"type":"noul","instructions":"x"},"b":{"type":"noul","instructions":"x"}}}`))
	if d := two.EstimatedTokens - one.EstimatedTokens; d < 0 || d > 3 {
		t.Errorf("a second small question added %d tokens", d)
	}
}

func FuzzParseRequest(f *testing.F) {
	for _, seed := range []string{
		`{"state":"s","questions":{"q":{"type":"noul","instructions":"x"}}}`,
		`{"state":{"a":[1,2]},"model":"m","questions":{"c":{"type":"choice","instructions":null,"criteria":{"a":null}}}}`,
		`{"state":"s","questions":{"q":{"type":"score","instructions":"x","criteria":[1]}}}`,
		`{"state":"\u4e2d\ud83d\ude00","questions":{}}`,
		`[`, `{"a":NaN}`, "\xEF\xBB\xBF{}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := ParseRequest(body)
		if err != nil {
			if !json.Valid(err.(*ValidationError).Body()) {
				t.Fatalf("422 body is not JSON: %s", err.(*ValidationError).Body())
			}
			return
		}
		// What passes is JSON to Python's decoder; Go's is stricter only
		// about NaN/Infinity, a BOM and encoded surrogates.
		if !json.Valid(body) && !bytes.ContainsAny(body, "NI\xEF\xED") {
			t.Fatalf("accepted a body that is not JSON: %q", body)
		}
		seen := map[string]bool{}
		for _, q := range req.Questions {
			if seen[q.ID] {
				t.Fatalf("question %q twice", q.ID)
			}
			seen[q.ID] = true
		}
		if req.EstimatedTokens < 0 {
			t.Fatalf("negative estimate")
		}
	})
}

// sameJSON reports whether two JSON texts decode to the same value.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	decode := func(b []byte) any {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("not JSON: %v: %s", err, b)
		}
		return v
	}
	return reflect.DeepEqual(decode(a), decode(b))
}

// Each case is a disagreement the differential test against the simulator
// found (simulator/differential_test.go), with the 422 pydantic and Python's
// json give, as the seed and FastAPI define it.
func TestParseRequestAsUpstream(t *testing.T) {
	const tagMsg = "Input tag '%s' found using 'type' does not match any of the expected tags: 'noul', 'choice', 'score'"
	tagError := func(tag, input string) string {
		return fmt.Sprintf(`{"detail":[{"type":"union_tag_invalid","loc":["body","questions","q"],"msg":%q,"input":%s,"ctx":{"discriminator":"'type'","tag":%q,"expected_tags":"'noul', 'choice', 'score'"}}]}`,
			fmt.Sprintf(tagMsg, tag), input, tag)
	}
	union := func(loc, input string) string {
		return fmt.Sprintf(`{"type":"string_type","loc":[%[1]s,"str"],"msg":"Input should be a valid string","input":%[2]s},`+
			`{"type":"dict_type","loc":[%[1]s,"dict[str,any]"],"msg":"Input should be a valid dictionary","input":%[2]s},`+
			`{"type":"list_type","loc":[%[1]s,"list[any]"],"msg":"Input should be a valid list","input":%[2]s}`, loc, input)
	}
	jsonError := func(pos int, msg string) string {
		return fmt.Sprintf(`{"detail":[{"type":"json_invalid","loc":["body",%d],"msg":"JSON decode error","input":{},"ctx":{"error":%q}}]}`, pos, msg)
	}
	crit := `"body","questions","q"`
	for _, tc := range []struct{ name, body, want string }{
		// A tag that is not a string is written as Python's str() of it.
		{"null tag", q(`{"type":null}`), tagError("None", `{"type":null}`)},
		{"bool tag", q(`{"type":true}`), tagError("True", `{"type":true}`)},
		{"int tag", q(`{"type":-0}`), tagError("0", `{"type":-0}`)},
		{"float tag", q(`{"type":1e3}`), tagError("1000.0", `{"type":1e3}`)},
		{"big float tag", q(`{"type":1E16}`), tagError("1e+16", `{"type":1E16}`)},
		{"small float tag", q(`{"type":-2.5e-7}`), tagError("-2.5e-07", `{"type":-2.5e-7}`)},
		{"overflowing tag", q(`{"type":1e999}`), tagError("inf", `{"type":1e999}`)},
		{"NaN tag", q(`{"type":NaN}`), tagError("nan", `null`)},
		{"list tag", q(`{"type":["noul"]}`), tagError("['noul']", `{"type":["noul"]}`)},
		{"object tag", q(`{"type":{"a":[1,null,true,"it's"],"a":{"b":"\t\u00e9\u00a0"}}}`),
			tagError(`{'a': {'b': '\té\xa0'}}`, `{"type":{"a":{"b":"\t\u00e9\u00a0"}}}`)},
		// Choice descriptions and score tiers are text or null.
		{"choice description a number", q(`{"type":"choice","instructions":"x","criteria":{"a":1,"b":null,"a":2,"c":true}}`),
			`{"detail":[` + union(crit+`,"choice","criteria","a"`, `2`) + `,` + union(crit+`,"choice","criteria","c"`, `true`) + `]}`},
		{"repeated description, last null", q(`{"type":"choice","instructions":"x","criteria":{"a":1,"a":null}}`), ``},
		{"one tier, a number", q(`{"type":"score","instructions":"x","criteria":[5]}`),
			`{"detail":[` + union(crit+`,"score","criteria",0`, `5`) + `]}`},
		{"tiers with numbers", q(`{"type":"score","instructions":"x","criteria":["a",5,null,false]}`),
			`{"detail":[` + union(crit+`,"score","criteria",1`, `5`) + `,` + union(crit+`,"score","criteria",3`, `false`) + `]}`},
		{"eleven numbers", q(`{"type":"score","instructions":"x","criteria":[1,2,3,4,5,6,7,8,9,10,11]}`),
			`{"detail":[{"type":"too_long","loc":[` + crit + `,"score","criteria"],"msg":"List should have at most 10 items after validation, not 11","input":[1,2,3,4,5,6,7,8,9,10,11],"ctx":{"field_type":"List","max_length":10,"actual_length":11}}]}`},
		// Noul criteria: an optional object of optional text.
		{"noul criteria a number", q(`{"type":"noul","instructions":"x","criteria":5}`),
			`{"detail":[{"type":"model_attributes_type","loc":[` + crit + `,"noul","criteria"],"msg":"Input should be a valid dictionary or object to extract fields from","input":5}]}`},
		{"noul criteria true a number", q(`{"type":"noul","instructions":"x","criteria":{"true":1,"other":2,"false":"no"}}`),
			`{"detail":[` + union(crit+`,"noul","criteria","true"`, `1`) + `]}`},
		{"noul criteria in field order", q(`{"type":"noul","instructions":"x","criteria":{"false":true,"true":1}}`),
			`{"detail":[` + union(crit+`,"noul","criteria","true"`, `1`) + `,` + union(crit+`,"noul","criteria","false"`, `true`) + `]}`},
		{"noul criteria other fields", q(`{"type":"noul","instructions":"x","criteria":{"other":2}}`), ``},
		// A repeated question id is validated once, with its last value.
		{"repeated id, last valid", `{"state":"s","questions":{"q":{"type":"bad"},"q":{"type":"noul","instructions":"x"}}}`, ``},
		{"repeated id, first with 256 options", strings.TrimSuffix(choiceBody(256, false), `}}`) + `,"q":{"type":"noul","instructions":"x"}}}`, ``},
		{"repeated id, in its first place", `{"state":"s","questions":{"q":5,"r":{"type":"noul"},"q":{"type":"x"}}}`,
			`{"detail":[{"type":"union_tag_invalid","loc":["body","questions","q"],"msg":"` + fmt.Sprintf(tagMsg, "x") + `","input":{"type":"x"},"ctx":{"discriminator":"'type'","tag":"x","expected_tags":"'noul', 'choice', 'score'"}},` +
				`{"type":"missing","loc":["body","questions","r","noul","instructions"],"msg":"Field required","input":{"type":"noul"}}]}`},
		// Python decodes the bytes first, then counts characters.
		{"position after CJK", `{"state":"中文", x}`, jsonError(15, "Expecting property name enclosed in double quotes")},
		{"position after an emoji", `{"state":"😀", x}`, jsonError(14, "Expecting property name enclosed in double quotes")},
		{"position after a BOM", "\xEF\xBB\xBF{x", jsonError(1, "Expecting property name enclosed in double quotes")},
		{"second BOM", "\xEF\xBB\xBF\xEF\xBB\xBF{}", jsonError(0, "Expecting value")},
		{"invalid UTF-8 after a syntax error", "{\"state\" 1, \"x\":\"\xff\"}", jsonError(17, "Invalid UTF-8")},
		{"invalid UTF-8 outside strings", "\xff\xfe{}", jsonError(0, "Invalid UTF-8")},
		{"bad \\u escape", `{"state":"\u12G4"}`, jsonError(11, "Invalid \\uXXXX escape")},
		{"short \\u escape at the end", `{"state":"\u1234`, jsonError(11, "Invalid \\uXXXX escape")},
		{"bad second half of a pair", `{"state":"\ud800\u12G4x"}`, jsonError(17, "Invalid \\uXXXX escape")},
		// An encoded surrogate is one character, written back as U+FFFD.
		{"encoded surrogate in an id", "{\"state\":\"s\",\"questions\":{\"\xED\xA0\x80\":{\"type\":\"x\"}}}",
			`{"detail":[{"type":"union_tag_invalid","loc":["body","questions","\ufffd"],"msg":"` + fmt.Sprintf(tagMsg, "x") + `","input":{"type":"x"},"ctx":{"discriminator":"'type'","tag":"x","expected_tags":"'noul', 'choice', 'score'"}}]}`},
		// NaN and Infinity are echoed only where Python's decoded value
		// still holds them, and then as null.
		{"NaN under a repeated key", `{"x":NaN,"x":[0, 1e3]}`,
			`{"detail":[{"type":"missing","loc":["body","state"],"msg":"Field required","input":{"x":[0,1e3]}},{"type":"missing","loc":["body","questions"],"msg":"Field required","input":{"x":[0,1e3]}}]}`},
		{"NaN kept", `{"x":[NaN],"y":1}`,
			`{"detail":[{"type":"missing","loc":["body","state"],"msg":"Field required","input":null},{"type":"missing","loc":["body","questions"],"msg":"Field required","input":null}]}`},
		{"encoded surrogate in an input", "{\"state\":[\"\xED\xA0\x80\"]}",
			`{"detail":[{"type":"missing","loc":["body","questions"],"msg":"Field required","input":{"state":["\ufffd"]}}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRequest([]byte(tc.body))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %s", err.(*ValidationError).Body())
			case tc.want == "":
			case err == nil:
				t.Fatalf("accepted, want %s", tc.want)
			case !sameJSON(t, err.(*ValidationError).Body(), []byte(tc.want)):
				t.Errorf("422 body\n %s\nwant\n %s", err.(*ValidationError).Body(), tc.want)
			}
		})
	}
}

// q wraps one question into a request body.
func q(question string) string {
	return `{"state":"s","questions":{"q":` + question + `}}`
}
