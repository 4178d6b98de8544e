package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// reviewAPI reads a `systemone_review` mount: its user info goes as basic
// auth, and the URL in messages is the redacted one.
type reviewAPI struct {
	base   *url.URL // without user info, path without a trailing slash
	user   *url.Userinfo
	name   string
	client *http.Client
}

func newReviewAPI(raw string, client *http.Client) (*reviewAPI, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// url.Error would quote the whole URL, password included.
		return nil, errors.New("--review is not an http(s) URL")
	}
	api := &reviewAPI{user: u.User, name: u.Redacted(), client: client}
	u.User = nil
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	api.base = u
	return api, nil
}

// open sends GET base + path and returns the 200 answer's body, which the
// caller closes; nil for a 404 when notFoundOK. Any other status is an
// error that shows the review API's short {"detail": ...} body.
func (a *reviewAPI) open(ctx context.Context, path, accept string, notFoundOK bool) (io.ReadCloser, error) {
	u := *a.base
	u.Path += path
	name := strings.TrimRight(a.name, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %v", name, err)
	}
	if a.user != nil {
		pass, _ := a.user.Password()
		req.SetBasicAuth(a.user.Username(), pass)
	}
	req.Header.Set("Accept", accept)
	resp, err := a.client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // its message repeats the URL
		}
		return nil, fmt.Errorf("GET %s: %v", name, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp.Body, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound && notFoundOK {
		return nil, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	msg := fmt.Sprintf("GET %s: %s: %s", name, resp.Status, detail(body))
	if resp.StatusCode == http.StatusUnauthorized && a.user == nil {
		msg += " (put the review API's basic_auth user in the URL: https://user:password@host/...)"
	}
	return nil, errors.New(msg)
}

// labels reads `/labels` and groups its lines by entry, in the order the
// entries first appear.
func (a *reviewAPI) labels(ctx context.Context) ([]labelled, error) {
	body, err := a.open(ctx, "/labels", "application/x-ndjson", false)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	var out []labelled
	index := map[string]int{}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for num := 1; sc.Scan(); num++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var f struct {
			Entry    *string         `json:"entry"`
			Question *string         `json:"question"`
			Type     *string         `json:"type"`
			Label    json.RawMessage `json:"label"`
		}
		if err := json.Unmarshal(raw, &f); err != nil || f.Entry == nil || f.Question == nil || f.Type == nil || len(f.Label) == 0 {
			return nil, fmt.Errorf("GET %s/labels: line %d is not a /labels line (an object with entry, question, type and label)", strings.TrimRight(a.name, "/"), num)
		}
		i, ok := index[*f.Entry]
		if !ok {
			i = len(out)
			index[*f.Entry] = i
			out = append(out, labelled{entry: *f.Entry})
		}
		out[i].lines = append(out[i].lines, line{raw: bytes.Clone(raw), question: *f.Question, typ: *f.Type, label: f.Label})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("GET %s/labels: %v", strings.TrimRight(a.name, "/"), err)
	}
	return out, nil
}

// request returns the stored request body of an entry: found is false when
// the entry has none (stored without include_content, or trimmed from the
// stream: 404). A body the review API returns as a JSON string (one that
// was not plain JSON when stored) is that string's text.
func (a *reviewAPI) request(ctx context.Context, entry string) (request []byte, found bool, err error) {
	body, err := a.open(ctx, "/items/"+url.PathEscape(entry), "application/json", true)
	if err != nil || body == nil {
		return nil, false, err
	}
	defer body.Close()
	raw, err := io.ReadAll(io.LimitReader(body, maxResponse+1))
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("reading GET items/%s: %v", entry, err)
	case len(raw) > maxResponse:
		return nil, false, fmt.Errorf("GET items/%s: answer over %d bytes", entry, maxResponse)
	}
	var it struct {
		Request json.RawMessage `json:"request"`
	}
	if err := json.Unmarshal(raw, &it); err != nil {
		return nil, false, fmt.Errorf("GET items/%s: not an Item", entry)
	}
	if len(it.Request) == 0 || string(it.Request) == "null" {
		return nil, false, nil
	}
	if it.Request[0] == '"' {
		var s string
		if err := json.Unmarshal(it.Request, &s); err != nil {
			return nil, false, fmt.Errorf("GET items/%s: unreadable request", entry)
		}
		return []byte(s), true, nil
	}
	return it.Request, true, nil
}
