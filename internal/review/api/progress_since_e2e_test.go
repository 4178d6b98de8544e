package api_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/review/calibrate"
)

// /progress?since= answers what `calibrate --since --json` prints, for an
// entry id and for a time (compared with when each entry was queued, the
// milliseconds of its id); a bad since is a 422 at ["query", "since"].
func TestReviewProgressSince(t *testing.T) {
	s := newStack(t, stackOptions{review: progressReview})
	labels := s.url + "/review/labels"
	s.labelAudited(t, "early", "noul", 30, 10, 0.8, true)
	time.Sleep(2 * time.Millisecond) // the next entry in a later millisecond than every one before
	first := s.addEntry(t, true, "request_id", "r-late-first", "questions", `[{"id":"late","type":"noul","route":"human","confidence":0.95,"answer":0.8}]`)
	if resp, body := s.call(t, http.MethodPut, "/review/items/"+first+"/labels", `{"labels":{"late":true},"reviewer":"ann"}`); resp.StatusCode != 204 {
		t.Fatalf("PUT: %d %s", resp.StatusCode, body)
	}
	s.labelAudited(t, "late", "noul", 40, 40, 0.95, true)
	id, _ := calibrate.ParseSince(first)
	at := id.Time().Format(time.RFC3339Nano)
	for _, since := range []string{first, at} {
		want := calibrateJSON(t, append(strings.Fields("--target 0.9"+progressArgs), "--since", since, "--json", labels)...)
		resp, body := s.call(t, http.MethodGet, "/review/progress?target=0.9&since="+url.QueryEscape(since), "")
		if resp.StatusCode != 200 || string(fromFile(body)) != want {
			t.Errorf("since=%s: %d\n%s\nwant\n%s", since, resp.StatusCode, body, want)
		}
		if !strings.Contains(want, `"labels": 41,`) || !strings.Contains(want, fmt.Sprintf(`"since": %q`, id.String())) {
			t.Errorf("since=%s: want the 41 entries from %s on:\n%s", since, first, want)
		}
	}
	// since= empty: every entry, as without it.
	_, all := s.call(t, http.MethodGet, "/review/progress?target=0.9", "")
	if _, body := s.call(t, http.MethodGet, "/review/progress?target=0.9&since=", ""); string(body) != string(all) || !strings.Contains(string(all), `"labels": 71,`) {
		t.Errorf("since= empty:\n%s\nwant every entry:\n%s", body, all)
	}
	for _, bad := range []string{"x", "1969-12-31T23:00:00Z", "2026-13-01T00:00:00Z", "12", "1-2-3"} {
		resp, body := s.call(t, http.MethodGet, "/review/progress?target=0.9&since="+url.QueryEscape(bad), "")
		if types, locs := detailTypes(t, resp, body); resp.StatusCode != 422 || len(types) != 1 || types[0] != "value_error" || fmt.Sprint(locs[0]) != "[query since]" {
			t.Errorf("since=%s: %d %v %v", bad, resp.StatusCode, types, locs)
		}
	}
}
