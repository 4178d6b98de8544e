package handlers_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
)

// TestCalibrationLoop is the README's loop, as an operator runs it: audit
// every routed answer, label the audited ones through the review API, run
// the real `systemone-gateway calibrate` against the API's /labels, paste
// the pin block it prints into the route block, reload, and see the new
// threshold route answers auto.
func TestCalibrationLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway binary")
	}
	bin := filepath.Join(t.TempDir(), "systemone-gateway")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/systemone-gateway").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rs := redistest.Start(t)
	sim := unlimitedSimulator(t)
	port := gatewaytest.FreePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	config := func(pins string) string {
		return fmt.Sprintf(`:%d {
	handle_path /review/* {
		systemone_review {
			redis %[2]s
			stream review:loop
		}
	}
	handle {
		systemone {
			redis %[2]s
			route {
%[3]s
				queue review:loop maxlen 1000
				audit 1
			}
		}
		reverse_proxy %[4]s
	}
}
`, port, rs.URL(), pins, sim.Addr())
	}
	g := gatewaytest.Load(t, config(""))

	// Unpinned: every answer routes human, and every one is audited.
	const n = 40
	body := func(i int) string {
		return fmt.Sprintf(`{"state":"Delivery case %d: the parcel arrived %d days after the promised date.","questions":{"late":{"type":"noul","instructions":"Was the delivery late?"}}}`, i, i%7)
	}
	for i := range n {
		resp, text := post(t, url, "loop", body(i))
		if resp.StatusCode != 200 || resp.Header.Get("X-Route") != "human" || resp.Header.Get("X-Route-Reason") != "unpinned_version" {
			t.Fatalf("request %d: %d %v %s", i, resp.StatusCode, resp.Header, text)
		}
	}

	// A reviewer agrees with every answer (yes when the model leans yes).
	var items []reviewItem
	waitFor(t, func() bool {
		var page struct{ Items []reviewItem }
		getJSON(t, url+"/review/items?limit=500", &page)
		items = page.Items
		return len(items) == n
	}, 10*time.Second)
	lowest := 1.0
	for _, it := range items {
		if !it.Audit || len(it.Questions) != 1 || it.Questions[0].Answer == nil {
			t.Fatalf("entry %+v: want an audited entry with the model's answer", it)
		}
		q := it.Questions[0]
		lowest = min(lowest, q.Confidence)
		label := fmt.Sprintf(`{"labels":{"late":%t},"reviewer":"ann"}`, *q.Answer >= 0.5)
		req, _ := http.NewRequest("PUT", url+"/review/items/"+it.ID+"/labels", strings.NewReader(label))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 204 {
			t.Fatalf("PUT labels of %s: %v %v", it.ID, resp, err)
		}
		resp.Body.Close()
	}

	// calibrate reads /labels: all 40 agree, so with target 0.9 (29 lines
	// needed at delta 0.05) the one-look method walks down to the lowest
	// confidence. (This is one look, fixed in advance: the default anytime
	// method needs more entries, and is tested in its own package.)
	// The mount's URL without /labels reaches the gateway (401
	// invalid_api_key: /review is not under handle_path /review/*) or the
	// review page (/review/): the one-line error says which URL was meant.
	for _, wrong := range []string{url + "/review", url + "/review/"} {
		var stderr bytes.Buffer
		cmd := exec.Command(bin, "calibrate", "--target", "0.9", wrong)
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || strings.Count(stderr.String(), "\n") != 1 ||
			!strings.Contains(stderr.String(), "did you mean "+url+"/review/labels?") {
			t.Errorf("calibrate %s: %v, stderr %q: want exit status 1 and the /labels URL in one line", wrong, err, stderr.String())
		}
	}

	cmd := exec.Command(bin, "calibrate", "--method", "uniform", "--target", "0.9", "--correct-within", "0s", "--json", url+"/review/labels")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("calibrate --json: %v\n%s", err, out)
	}
	var res struct {
		Groups []struct {
			Model, Type string
			Threshold   *float64
			Agree, N    int
		} `json:"groups"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Groups) != 1 || res.Groups[0].Threshold == nil ||
		*res.Groups[0].Threshold != lowest || res.Groups[0].Agree != n || res.Groups[0].N != n {
		t.Fatalf("calibrate --json: %s (err %v), want one noul group at %v, %d/%d", out, err, lowest, n, n)
	}
	out, err = exec.Command(bin, "calibrate", "--method", "uniform", "--target", "0.9", "--correct-within", "0s", url+"/review/labels").Output()
	if err != nil {
		t.Fatalf("calibrate: %v\n%s", err, out)
	}
	text := string(out)
	start, end := strings.Index(text, "\tpin "), strings.LastIndex(text, "\n}")
	if start < 0 || end < start {
		t.Fatalf("calibrate printed no pin block:\n%s", text)
	}
	pins := text[start:end]
	t.Logf("calibrate:\n%s", text)

	// Paste, reload: answers at or above the threshold now route auto.
	g.Reload(config(pins))
	var autos int
	for i := range n {
		resp, text := post(t, url, "loop", body(i))
		if resp.StatusCode != 200 {
			t.Fatalf("after the reload: %d %s", resp.StatusCode, text)
		}
		if resp.Header.Get("X-Route") == "auto" {
			autos++
			if resp.Header.Get("X-Route-Reason") != "confident" || resp.Header.Get("X-Route-Model") != "service-1.0.0" {
				t.Errorf("auto answer %v", resp.Header)
			}
		}
	}
	if autos != n {
		t.Errorf("%d of %d answers routed auto under the calibrated threshold, want all: each is at or above the lowest labelled confidence", autos, n)
	}
}

// reviewItem is what the test reads of a review API item.
type reviewItem struct {
	ID        string `json:"id"`
	Audit     bool   `json:"audit"`
	Questions []struct {
		ID         string   `json:"id"`
		Confidence float64  `json:"confidence"`
		Answer     *float64 `json:"answer"`
	} `json:"questions"`
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, buf.Bytes())
	}
	if err := json.Unmarshal(buf.Bytes(), v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, buf.Bytes())
	}
}
