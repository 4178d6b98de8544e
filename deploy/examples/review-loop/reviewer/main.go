// Command reviewer stands in for the people who label in the review page,
// for the walk-through of docs/walkthrough.md with the simulator: it labels
// the oldest unlabelled audited items through the review API.
//
// The simulator's answers have a truth drawn from the request's content
// (simulator.Truth), which a person reading the page cannot know; the
// script labels with it, so that calibration finds the curve the simulator
// answers with. With -disagree it labels a yes/no question the opposite of
// the model's answer instead (other types: the truth when it differs from
// the answer, else the question is left unlabelled), so that every label
// disagrees and the guarantee monitor raises its alarm.
//
//	go run ./deploy/examples/review-loop/reviewer -review http://ann:secret@localhost:8080/review -n 80
//
// Credentials in the -review URL are sent as basic auth. It prints one line,
// "labelled <n> items", and exits 1 on any error.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/systemone/systemone-gateway/simulator"
)

func main() {
	review := flag.String("review", "http://ann:secret@localhost:8080/review", "the review API's mount, credentials in the URL")
	n := flag.Int("n", 80, "the most items to label")
	disagree := flag.Bool("disagree", false, "label against the model's answers, to raise the guarantee alarm")
	reviewer := flag.String("reviewer", "", "the reviewer name stored with the labels (default: the URL's user)")
	flag.Parse()
	labelled, err := run(strings.TrimSuffix(*review, "/"), *n, *disagree, *reviewer)
	fmt.Printf("labelled %d items\n", labelled)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reviewer:", err)
		os.Exit(1)
	}
}

type question struct {
	ID     string          `json:"id"`
	Type   string          `json:"type"`
	Answer json.RawMessage `json:"answer"`
}

type item struct {
	ID        string          `json:"id"`
	Questions []question      `json:"questions"`
	Request   json.RawMessage `json:"request"`
}

var client = &http.Client{Timeout: 30 * time.Second}

// run labels up to n of the oldest unlabelled audited items.
func run(review string, n int, disagree bool, reviewer string) (int, error) {
	u, err := url.Parse(review)
	if err != nil || u.Host == "" {
		return 0, fmt.Errorf("-review %q: want an http URL", review)
	}
	if reviewer == "" && u.User != nil {
		reviewer = u.User.Username()
	}
	if reviewer == "" {
		reviewer = "stand-in"
	}
	labelled, after := 0, ""
	for labelled < n {
		var page struct {
			Items []item `json:"items"`
			Next  string `json:"next"`
		}
		q := url.Values{"audit": {"1"}, "unlabeled": {"1"}, "limit": {fmt.Sprint(min(n-labelled, 500))}}
		if after != "" {
			q.Set("after", after)
		}
		if err := getJSON(review+"/items?"+q.Encode(), &page); err != nil {
			return labelled, err
		}
		for _, it := range page.Items {
			labels, err := labelsFor(it, disagree)
			if err != nil {
				return labelled, fmt.Errorf("item %s: %w", it.ID, err)
			}
			if len(labels) == 0 {
				continue
			}
			body, _ := json.Marshal(map[string]any{"labels": labels, "reviewer": reviewer})
			if err := send("PUT", review+"/items/"+url.PathEscape(it.ID)+"/labels", body, http.StatusNoContent); err != nil {
				return labelled, err
			}
			labelled++
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	return labelled, nil
}

// labelsFor gives an item's labels: the truth of its stored request, or,
// with disagree, labels against the model's answers.
func labelsFor(it item, disagree bool) (map[string]any, error) {
	if len(it.Request) == 0 {
		return nil, errors.New("no stored request: the route block needs include_content")
	}
	truth, err := simulator.Truth(it.Request)
	if err != nil {
		return nil, err
	}
	if !disagree {
		return truth, nil
	}
	labels := make(map[string]any)
	for _, q := range it.Questions {
		var p float64
		if q.Type == "noul" && json.Unmarshal(q.Answer, &p) == nil {
			labels[q.ID] = p < 0.5
			continue
		}
		if t, ok := truth[q.ID]; ok && !sameAnswer(t, q.Answer) {
			labels[q.ID] = t
		}
	}
	return labels, nil
}

// sameAnswer reports whether a truth (choice key or score tier) is the
// model's answer, as the review API compares them.
func sameAnswer(truth any, answer json.RawMessage) bool {
	switch t := truth.(type) {
	case string:
		var a string
		return json.Unmarshal(answer, &a) == nil && a == t
	case int:
		var a float64
		return json.Unmarshal(answer, &a) == nil && math.Abs(a-float64(t)) <= 0.5
	}
	return false
}

func getJSON(url string, v any) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		text, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s %s", redact(url), resp.Status, text)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func send(method, url string, body []byte, want int) error {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		text, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s %s", method, redact(url), resp.Status, text)
	}
	return nil
}

// redact drops the password from a URL for an error message.
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}
