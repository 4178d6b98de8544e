package calibrate

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const good = `{"entry":"1-0","request_id":"r1","org":"acme","model":"service-1.0.0","type":"noul","question":"is_safe","confidence":0.9,"answer":0.95,"label":true,"agree":true,"audit":true,"route":"auto","reviewer":"ana","ts":"2026-11-01T00:00:00Z"}`

func TestReadLines(t *testing.T) {
	in := good + "\n\n" + // blank lines are skipped, and still counted
		`{"model":"m","type":"score","question":"q","confidence":null,"agree":false,"audit":false}` + "\r\n" +
		`{"model":"m","type":"choice","question":"c","confidence":-0,"agree":true,"audit":true,"extra":[1,2]}`
	lines, err := ReadLines(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Line{
		{Model: "service-1.0.0", Type: "noul", Question: "is_safe", Confidence: 0.9, HasConfidence: true, Agree: true, Audit: true,
			Entry: EntryID{Ms: 1, Seq: 0, Set: true}, RequestID: "r1", Labelled: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixNano(), Org: "acme", Auto: true},
		{Model: "m", Type: "score", Question: "q"},
		{Model: "m", Type: "choice", Question: "c", Confidence: 0, HasConfidence: true, Agree: true, Audit: true},
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d", len(lines), len(want))
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, lines[i], want[i])
		}
	}
}

func TestReadLinesErrors(t *testing.T) {
	line := func(replace, with string) string { return strings.Replace(good, replace, with, 1) }
	for _, tt := range []struct {
		name, line, want string
	}{
		{"not JSON", `{"model":`, "line 3: not a JSON object"},
		{"an array", `[1,2]`, "line 3: not a JSON object"},
		{"null", `null`, "line 3: not a JSON object"},
		{"agree missing", line(`"agree":true,`, ""), `line 3: no "agree" field`},
		{"agree a string", line(`"agree":true`, `"agree":"yes"`), `line 3: "agree" is "yes", want true or false`},
		{"agree null beside a label", line(`"agree":true`, `"agree":null`), `line 3: "agree" is null but "label" is not: want agree true or false for a label`},
		{"audit a number", line(`"audit":true`, `"audit":1`), `line 3: "audit" is 1, want true or false`},
		{"model a number", line(`"model":"service-1.0.0"`, `"model":7`), `line 3: "model" is 7, want a string`},
		{"question missing", line(`"question":"is_safe",`, ""), `line 3: no "question" field`},
		{"type unknown", line(`"type":"noul"`, `"type":"rank"`), `line 3: "type" is "rank", want one of noul, choice, score`},
		{"confidence a string", line(`"confidence":0.9`, `"confidence":"0.9"`), `line 3: "confidence" is "0.9", want a number from 0 to 1 or null`},
		{"confidence above 1", line(`"confidence":0.9`, `"confidence":1.5`), `line 3: "confidence" is 1.5, want a number from 0 to 1 or null`},
		{"confidence below 0", line(`"confidence":0.9`, `"confidence":-0.1`), `"confidence" is -0.1`},
		{"confidence missing", line(`"confidence":0.9,`, ""), `line 3: no "confidence" field`},
		{"long value", line(`"model":"service-1.0.0"`, `"model":[`+strings.Repeat(`"abcdef",`, 20)+`1]`), `"model" is ["abcdef","abcdef","abcdef","abcdef",..., want a string`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadLines(strings.NewReader(good + "\n" + good + "\n" + tt.line + "\n" + good))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
	long := strings.Replace(good, `"org":"acme"`, `"org":"`+strings.Repeat("a", MaxLineBytes)+`"`, 1)
	if _, err := ReadLines(strings.NewReader(good + "\n" + long + "\n")); err == nil || !strings.Contains(err.Error(), "line 2: longer than") {
		t.Errorf("long line: %v", err)
	}
}

func TestLoadFileAndStdin(t *testing.T) {
	file := filepath.Join(t.TempDir(), "labels.ndjson")
	if err := os.WriteFile(file, []byte(good+"\n"+good+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lines, err := Load(context.Background(), file, nil)
	if err != nil || lines.Lines() != 2 {
		t.Errorf("file: %d lines, %v", lines.Lines(), err)
	}
	lines, err = Load(context.Background(), "-", strings.NewReader(good+"\n"))
	if err != nil || lines.Lines() != 1 {
		t.Errorf("stdin: %d lines, %v", lines.Lines(), err)
	}
	if _, err := Load(context.Background(), "-", strings.NewReader(good+"\n{}\n")); err == nil || err.Error() != `reading standard input: line 2: no "model" field` {
		t.Errorf("stdin error: %v", err)
	}
	if err := os.WriteFile(file, []byte(good+"\n"+`{"model":1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(context.Background(), file, nil); err == nil || err.Error() != "reading "+file+`: line 2: "model" is 1, want a string` {
		t.Errorf("file error: %v", err)
	}
}

// reviewAPI serves /review/labels behind basic auth, as a Caddy
// `basic_auth` in front of `systemone_review` would.
func reviewAPI(t *testing.T, body string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		if !ok || user != "ana" || pass != "s3cret:pw" {
			w.Header().Set("WWW-Authenticate", `Basic realm="restricted"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/review/labels":
			w.Header().Set("Content-Type", "application/x-ndjson")
			_, _ = w.Write([]byte(body))
		case "/review/broken":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"detail":"store_unavailable"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestLoadURL(t *testing.T) {
	srv := reviewAPI(t, good+"\n"+good+"\n"+good+"\n")
	host := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	lines, err := Load(ctx, "http://ana:s3cret%3Apw@"+host+"/review/labels", nil)
	if err != nil || lines.Lines() != 3 {
		t.Fatalf("with basic auth: %d lines, %v", lines.Lines(), err)
	}
	// The scheme is case-insensitive, as in any URL.
	if _, err := Load(ctx, "HTTP://ana:s3cret%3Apw@"+host+"/review/labels", nil); err != nil {
		t.Errorf("HTTP://: %v", err)
	}

	for _, tt := range []struct {
		name, url, want string
	}{
		{"no credentials", "http://" + host + "/review/labels",
			"GET http://" + host + "/review/labels: 401 Unauthorized (put the review API's basic_auth user in the URL"},
		{"wrong password", "http://ana:wrong@" + host + "/review/labels",
			"GET http://ana:xxxxx@" + host + "/review/labels: 401 Unauthorized"},
		{"server error", "http://ana:s3cret%3Apw@" + host + "/review/broken",
			`GET http://ana:xxxxx@` + host + `/review/broken: 500 Internal Server Error: {"detail":"store_unavailable"}`},
		{"not found", "http://ana:s3cret%3Apw@" + host + "/labels",
			"GET http://ana:xxxxx@" + host + "/labels: 404 Not Found: 404 page not found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(ctx, tt.url, nil)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
			if err != nil && (strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "wrong")) {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}

	// A malformed line from the server names its line.
	bad := reviewAPI(t, good+"\n"+`{"model":"m","type":"noul"}`+"\n")
	_, err = Load(ctx, "http://ana:s3cret%3Apw@"+strings.TrimPrefix(bad.URL, "http://")+"/review/labels", nil)
	if err == nil || !strings.Contains(err.Error(), `line 2: no "question" field`) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("malformed line: %v", err)
	}

	// Nothing listening: the error names the URL, not the password.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	_, err = Load(ctx, "http://ana:s3cret%3Apw@"+strings.TrimPrefix(closed.URL, "http://")+"/review/labels", nil)
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "GET http://ana:xxxxx@") {
		t.Errorf("refused: %v", err)
	}
	if _, err := Load(ctx, "http://ana:s3cret@[::1/labels", nil); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("bad URL: %v", err)
	}
}

// TestCommandSources runs the whole command over each kind of source.
func TestCommandSources(t *testing.T) {
	data, err := os.ReadFile("testdata/labels.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := runCommand(t, nil, "--target", "0.9", "--json", "testdata/labels.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	fromStdin, _, err := runCommand(t, strings.NewReader(string(data)), "--target", "0.9", "--json", "-")
	if err != nil || fromStdin != want {
		t.Errorf("stdin: %v\n%s", err, fromStdin)
	}
	srv := reviewAPI(t, string(data))
	fromURL, _, err := runCommand(t, nil, "--target", "0.9", "--json", "http://ana:s3cret%3Apw@"+strings.TrimPrefix(srv.URL, "http://")+"/review/labels")
	if err != nil || fromURL != want {
		t.Errorf("URL: %v\n%s", err, fromURL)
	}
}
