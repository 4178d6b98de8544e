// Package client is the review loop's one client for the review API
// (a `systemone_review` mount): `calibrate` reads `/labels` through it,
// `replay` reads `/labels` and `/items/<id>`.
//
// It trusts only the URL it is given. User info in that URL is sent as
// basic auth, in a header, never as part of a URL that may be logged, and
// no redirect is followed: a 3xx answer is an error that names where it
// pointed, so the password goes to the named origin and nowhere else
// (Go's client keeps the Authorization header on a redirect to another
// port of the same host). Answers are streamed to the caller, never read
// whole, and messages show the URL with its password masked.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
)

// DefaultHeaderTimeout bounds the wait for an answer's headers with the
// default HTTP client. There is no overall timeout: a large `/labels` may
// take a while to stream.
const DefaultHeaderTimeout = 30 * time.Second

// Hint401 is added to a 401 answer's error when the URL carries no user:
// the review API is meant to sit behind Caddy's basic_auth.
const Hint401 = "put the review API's basic_auth user in the URL: https://user:password@host/..."

// Media types of the review API's answers, for Open's accept.
const (
	NDJSON = "application/x-ndjson" // GET /labels
	JSON   = "application/json"     // every other answer
)

// ErrNotHTTP is New's error for a URL that is not an absolute http(s) URL.
// It never quotes the URL, which may hold a password.
var ErrNotHTTP = errors.New("not an http(s) URL")

// Client reads one review API URL.
type Client struct {
	base *url.URL // without user info
	user *url.Userinfo
	http *http.Client
}

// New returns a client for base, the URL of a `systemone_review` mount
// (or, for a single read, of one of its paths). client sends the
// requests: nil for one with http.DefaultTransport's settings and
// DefaultHeaderTimeout; a given client is used as it is, except that it
// follows no redirect.
func New(base string, client *http.Client) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (!strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https")) || u.Host == "" {
		return nil, ErrNotHTTP
	}
	if client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = DefaultHeaderTimeout
		client = &http.Client{Transport: t}
	}
	c := &Client{user: u.User, http: NoRedirect(client)}
	u.User = nil
	c.base = u
	return c, nil
}

// NoRedirect returns a copy of client that follows no redirect: a 3xx
// answer is returned to the caller as it came.
func NoRedirect(client *http.Client) *http.Client {
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// url is the client's URL with the path segments elems joined to it.
func (c *Client) url(elems []string) *url.URL {
	if len(elems) == 0 {
		return c.base
	}
	escaped := make([]string, len(elems))
	for i, e := range elems {
		escaped[i] = url.PathEscape(e)
	}
	return c.base.JoinPath(escaped...)
}

// Redacted is the URL Open reads for elems, as messages show it: with its
// user, the password masked.
func (c *Client) Redacted(elems ...string) string {
	shown := *c.url(elems)
	shown.User = c.user
	return shown.Redacted()
}

// StatusError is an answer other than 200.
type StatusError struct {
	// Code is the answer's status code.
	Code int
	msg  string
}

func (e *StatusError) Error() string { return e.msg }

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

// Open sends GET to the client's URL, with the path segments elems
// (escaped as path segments) joined to it, and returns the 200 answer's
// body, unread, for the caller to stream and close. Any other answer is
// a *StatusError that shows the review API's short {"detail": ...} body;
// a 3xx is never followed.
func (c *Client) Open(ctx context.Context, accept string, elems ...string) (io.ReadCloser, error) {
	u := c.url(elems)
	name := "GET " + c.Redacted(elems...)

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if c.user != nil {
		pass, _ := c.user.Password()
		req.SetBasicAuth(c.user.Username(), pass)
	}
	req.Header.Set("Accept", accept)
	resp, err := c.http.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // its message repeats the URL
		}
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp.Body, nil
	}
	defer resp.Body.Close()
	msg := name + ": " + resp.Status
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		if loc, err := resp.Location(); err == nil {
			msg += " to " + loc.Redacted()
		}
		msg += ": redirects are not followed, so that credentials go only to the URL given; give the URL that answers"
		return nil, &StatusError{Code: resp.StatusCode, msg: msg}
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if d := Printable(body); d != "" {
		msg += ": " + d
	}
	if resp.StatusCode == http.StatusUnauthorized && c.user == nil {
		msg += " (" + Hint401 + ")"
	}
	return nil, &StatusError{Code: resp.StatusCode, msg: msg}
}

// Printable shows an answer's body in a message: trimmed, at most 200
// bytes, invalid UTF-8 and control characters (a terminal's escapes
// among them) shown as '?'.
func Printable(body []byte) string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(body), "?"))
	cut := len(s) > 200
	if cut {
		s = strings.ToValidUTF8(s[:200], "")
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
	if cut {
		s += "..."
	}
	return s
}
