package client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// recorder is a loopback server that records the Authorization header of
// every request it gets.
type recorder struct {
	*httptest.Server
	mu    sync.Mutex
	auths []string
}

func newRecorder(t *testing.T, h http.HandlerFunc) *recorder {
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.auths = append(r.auths, req.Header.Get("Authorization"))
		r.mu.Unlock()
		h(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.auths...)
}

func withUser(srv *httptest.Server, user string) string {
	return strings.Replace(srv.URL, "http://", "http://"+user+"@", 1)
}

// A redirect from the review API is an error naming where it pointed; the
// server it points at, another port of the same host, gets no request,
// so never the basic-auth password.
func TestRedirectNotFollowed(t *testing.T) {
	elsewhere := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "{}\n") })
	for _, status := range []int{301, 302, 303, 307, 308} {
		review := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere.URL+"/review/labels", status)
		})
		// A client that would follow redirects is made not to.
		c, err := New(withUser(review.Server, "ann:s3cret")+"/review", &http.Client{})
		if err != nil {
			t.Fatal(err)
		}
		body, err := c.Open(context.Background(), NDJSON, "labels")
		if err == nil {
			body.Close()
			t.Fatalf("%d: followed", status)
		}
		want := "GET http://ann:xxxxx@" + review.Listener.Addr().String() + "/review/labels: " + strconv.Itoa(status) + " " + http.StatusText(status)
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "to "+elsewhere.URL+"/review/labels: redirects are not followed") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%d: %v", status, err)
		}
		var se *StatusError
		if !errors.As(err, &se) || se.Code != status {
			t.Errorf("%d: not a StatusError: %#v", status, err)
		}
		if got := review.seen(); len(got) != 1 || got[0] != "Basic YW5uOnMzY3JldA==" {
			t.Errorf("%d: review API saw %q", status, got)
		}
	}
	if got := elsewhere.seen(); len(got) != 0 {
		t.Errorf("the redirect's target got %d requests (Authorization %q)", len(got), got)
	}
}

// Open hands back the body as it streams: the first line reads before
// the server has sent the rest.
func TestOpenStreams(t *testing.T) {
	release := make(chan struct{})
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "second\n")
	})
	c, err := New(srv.URL+"/review/", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := c.Open(context.Background(), NDJSON, "labels")
	if err != nil {
		close(release)
		t.Fatal(err)
	}
	defer body.Close()
	r := bufio.NewReader(body)
	first, err := r.ReadString('\n')
	close(release) // only now may the server finish
	if err != nil || first != "first\n" {
		t.Fatalf("first line %q, %v", first, err)
	}
	if rest, err := io.ReadAll(r); err != nil || string(rest) != "second\n" {
		t.Errorf("rest %q, %v", rest, err)
	}
}

func TestOpenAnswers(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		switch {
		case !ok || user != "ana" || pass != "s3cret:pw":
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.EscapedPath() == "/review/items/a%2Fb":
			io.WriteString(w, `{"id":"a/b"}`)
		case r.URL.Path == "/review/broken":
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "{\"detail\":\"store\x1b[2J\xff\"}\n")
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"detail":"not_found"}`)
		}
	})
	addr := srv.Listener.Addr().String()
	ctx := context.Background()
	open := func(base string, elems ...string) (string, error) {
		c, err := New(base, nil)
		if err != nil {
			return "", err
		}
		body, err := c.Open(ctx, JSON, elems...)
		if err != nil {
			return "", err
		}
		defer body.Close()
		b, err := io.ReadAll(body)
		return string(b), err
	}
	// A path segment is escaped, the base URL taken as it is.
	if got, err := open("http://ana:s3cret%3Apw@"+addr+"/review", "items", "a/b"); err != nil || got != `{"id":"a/b"}` {
		t.Errorf("item: %q, %v", got, err)
	}
	for _, tt := range []struct{ base, want string }{
		{"http://" + addr + "/review/labels", "GET http://" + addr + "/review/labels: 401 Unauthorized (" + Hint401 + ")"},
		{"http://ana:wrong@" + addr + "/review/labels", "GET http://ana:xxxxx@" + addr + "/review/labels: 401 Unauthorized"},
		{"http://ana:s3cret%3Apw@" + addr + "/review/broken", "GET http://ana:xxxxx@" + addr + `/review/broken: 500 Internal Server Error: {"detail":"store?[2J?"}`},
		{"HTTP://ana:s3cret%3Apw@" + addr + "/review/gone", "GET http://ana:xxxxx@" + addr + `/review/gone: 404 Not Found: {"detail":"not_found"}`},
	} {
		_, err := open(tt.base)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s:\n got %v\nwant %s", tt.base, err, tt.want)
		}
	}
	if _, err := open("http://ana:s3cret%3Apw@" + addr + "/review/gone"); !IsNotFound(err) {
		t.Errorf("404 is not IsNotFound: %v", err)
	}
	for _, bad := range []string{"ftp://ana:s3cret@host/x", "http://ana:s3cret@[::1/labels", "/review/labels", "labels"} {
		if _, err := New(bad, nil); err != ErrNotHTTP {
			t.Errorf("New(%q): %v", bad, err)
		}
	}
	srv.Close()
	if _, err := open("http://ana:s3cret%3Apw@" + addr + "/review/labels"); err == nil || strings.Contains(err.Error(), "s3cret") || !strings.HasPrefix(err.Error(), "GET http://ana:xxxxx@"+addr+"/review/labels: ") {
		t.Errorf("refused: %v", err)
	}
}

func TestPrintable(t *testing.T) {
	long := strings.Repeat("é", 150)
	for in, want := range map[string]string{
		"  ok \n":        "ok",
		"a\x1b]0;x\x07b": "a?]0;x?b",
		"\xff\xfe":       "?",
		long:             strings.Repeat("é", 100) + "...",
		"":               "",
	} {
		if got := Printable([]byte(in)); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
