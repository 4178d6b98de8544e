package calibrate

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// A /labels URL that redirects, here to another port of the same host, is
// an error: the basic-auth password never reaches where it points.
func TestLoadURLFollowsNoRedirect(t *testing.T) {
	var reached atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.Write([]byte(good + "\n"))
	}))
	t.Cleanup(elsewhere.Close)
	review := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(review.Close)
	host := strings.TrimPrefix(review.URL, "http://")
	_, err := Load(context.Background(), "http://ana:s3cret@"+host+"/review/labels", nil)
	want := "GET http://ana:xxxxx@" + host + "/review/labels: 307 Temporary Redirect to " + elsewhere.URL + "/review/labels: redirects are not followed"
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %v, want %q", err, want)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the redirect's target got %d requests", n)
	}
}
