package replay

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// elsewhere is a loopback server that a redirect points at: it records
// every request's Authorization header and answers as a review API and an
// upstream would, so that following the redirect would succeed.
type elsewhere struct {
	*httptest.Server
	mu    sync.Mutex
	auths []string
}

func newElsewhere(t *testing.T) *elsewhere {
	e := &elsewhere{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.auths = append(e.auths, r.Header.Get("Authorization"))
		e.mu.Unlock()
		io.WriteString(w, labelsNDJSON)
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *elsewhere) requests() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.auths...)
}

// A 307 from --upstream to another port of the same host is a failed
// entry, not retried: the API key never reaches that port.
func TestUpstreamRedirectNotFollowed(t *testing.T) {
	f := newFixture(t)
	away := newElsewhere(t)
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, away.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirecting.Close)
	var log bytes.Buffer
	sum, err := Run(context.Background(), Options{
		Review: f.review.URL + "/review", Upstream: redirecting.URL, Model: "service-2.0.0", APIKey: "sk-secret",
		Log: &log, Sleep: func(context.Context, time.Duration) error { return nil },
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// 1-0, 4-0, 5-0 and 6-0 hold a request: each fails once.
	if sum.Replayed != 0 || sum.Failed != 4 || sum.Skipped != 2 {
		t.Errorf("summary %+v", sum)
	}
	if got := away.requests(); len(got) != 0 {
		t.Errorf("the redirect's target got %d requests, Authorization %q", len(got), got)
	}
	if !strings.Contains(log.String(), "entry 1-0: answered 307 Temporary Redirect: replay follows no redirect") {
		t.Errorf("log:\n%s", log.String())
	}
}

// A redirect from the review API, on /labels or on an Item, is a failure:
// the basic-auth password never reaches where it points.
func TestReviewRedirectNotFollowed(t *testing.T) {
	f := newFixture(t)
	away := newElsewhere(t)
	for _, path := range []string{"/review/labels", "/review/items/"} {
		review := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, path) {
				http.Redirect(w, r, away.URL+r.URL.Path, http.StatusTemporaryRedirect)
				return
			}
			f.review.Config.Handler.ServeHTTP(w, r)
		}))
		t.Cleanup(review.Close)
		var log bytes.Buffer
		sum, err := Run(context.Background(), Options{
			Review: strings.Replace(review.URL, "http://", "http://ann:s3cret@", 1) + "/review", Upstream: f.upstream.URL,
			Model: "service-2.0.0", APIKey: "sk-secret", Log: &log,
		}, io.Discard)
		switch path {
		case "/review/labels":
			if err == nil || !strings.Contains(err.Error(), "/review/labels: 307 Temporary Redirect to "+away.URL+"/review/labels: redirects are not followed") || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("/labels redirected: %v", err)
			}
		default:
			if err != nil || sum.Failed != 6 || sum.Replayed != 0 || !strings.Contains(log.String(), "entry 1-0: GET http://ann:xxxxx@") {
				t.Errorf("items redirected: %+v, %v, log:\n%s", sum, err, log.String())
			}
		}
	}
	if got := away.requests(); len(got) != 0 {
		t.Errorf("the redirect's target got %d requests, Authorization %q", len(got), got)
	}
}
