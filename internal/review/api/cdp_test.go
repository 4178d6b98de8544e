package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// A headless Chromium driven over the Chrome DevTools Protocol: just the
// few commands the page test needs (navigate, evaluate, keys, clicks), on
// golang.org/x/net/websocket, so the test brings in no browser library.

// chromiumPath finds the browser: $CHROMIUM, else chromium or
// chromium-browser on PATH. Without one, the test fails in CI (CI=true:
// .ci/run installs the Debian package chromium) and skips elsewhere.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium not found on PATH: CI must install it (Debian package chromium)")
	}
	t.Skip("chromium not found on PATH (set CHROMIUM, or install the Debian package chromium)")
	return ""
}

var devtoolsURL = regexp.MustCompile(`DevTools listening on (ws://\S+)`)

// browser is a running Chromium and its DevTools connection.
type browser struct {
	t      *testing.T
	ws     *websocket.Conn
	mu     sync.Mutex
	nextID int64
	wait   map[int64]chan cdpMessage
	// problems are the page's uncaught exceptions and console errors.
	problems []string
	stderr   []string
}

type cdpMessage struct {
	ID        int64           `json:"id,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// startBrowser starts a headless Chromium with a fresh profile and
// connects to it; both end with the test.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	bin := chromiumPath(t)
	profile := t.TempDir() // removed after the browser has exited: cleanups run last-in first-out
	cmd := exec.Command(bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
		"--no-first-run", "--no-default-browser-check", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--disable-extensions",
		"--user-data-dir="+profile, "--remote-debugging-port=0",
		// x/net/websocket always sends an Origin; DevTools refuses
		// origins it was not told to allow.
		"--remote-allow-origins=http://127.0.0.1",
		"about:blank")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	b := &browser{t: t, wait: map[int64]chan cdpMessage{}}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			b.mu.Lock()
			b.stderr = append(b.stderr, line)
			b.mu.Unlock()
			if m := devtoolsURL.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	var wsURL string
	select {
	case wsURL = <-found:
	case <-exited:
		t.Fatalf("chromium exited before DevTools listened:\n%s", b.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("chromium did not report its DevTools address:\n%s", b.log())
	}
	ws, err := websocket.Dial(wsURL, "", "http://127.0.0.1")
	if err != nil {
		t.Fatalf("connecting to DevTools at %s: %v", wsURL, err)
	}
	b.ws = ws
	t.Cleanup(func() { _ = ws.Close() })
	go b.read()
	return b
}

func (b *browser) log() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.stderr, "\n")
}

// read delivers answers to their callers and keeps the page's problems.
func (b *browser) read() {
	for {
		var data []byte
		if err := websocket.Message.Receive(b.ws, &data); err != nil {
			b.mu.Lock()
			for id, ch := range b.wait {
				close(ch)
				delete(b.wait, id)
			}
			b.mu.Unlock()
			return
		}
		var m cdpMessage
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch, ok := b.wait[m.ID]; ok {
				ch <- m
				delete(b.wait, m.ID)
			}
		} else {
			switch m.Method {
			case "Runtime.exceptionThrown":
				b.problems = append(b.problems, "exception: "+string(m.Params))
			case "Runtime.consoleAPICalled":
				var p struct {
					Type string `json:"type"`
				}
				if json.Unmarshal(m.Params, &p) == nil && p.Type == "error" {
					b.problems = append(b.problems, "console error: "+string(m.Params))
				}
			}
		}
		b.mu.Unlock()
	}
}

// call sends a command (to a page's session, or the browser with session
// "") and returns its result.
func (b *browser) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	ch := make(chan cdpMessage, 1)
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	b.wait[id] = ch
	b.mu.Unlock()
	msg, _ := json.Marshal(cdpMessage{ID: id, SessionID: session, Method: method, Params: raw})
	if err := websocket.Message.Send(b.ws, string(msg)); err != nil {
		return nil, err
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return nil, errors.New("DevTools connection closed")
		}
		if m.Error != nil {
			return nil, fmt.Errorf("%s: %s", method, m.Error.Message)
		}
		return m.Result, nil
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.wait, id)
		b.mu.Unlock()
		return nil, fmt.Errorf("%s: %v", method, ctx.Err())
	}
}

// tab is one page target.
type tab struct {
	b       *browser
	ctx     context.Context
	session string
}

// newTab opens a blank page; every command on it is bounded by ctx.
func (b *browser) newTab(ctx context.Context) *tab {
	b.t.Helper()
	res, err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"})
	if err != nil {
		b.t.Fatal(err)
	}
	var target struct {
		TargetID string `json:"targetId"`
	}
	_ = json.Unmarshal(res, &target)
	res, err = b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true})
	if err != nil {
		b.t.Fatal(err)
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(res, &attached)
	tb := &tab{b: b, ctx: ctx, session: attached.SessionID}
	tb.do("Runtime.enable", nil)
	tb.do("Page.enable", nil)
	return tb
}

func (tb *tab) do(method string, params any) json.RawMessage {
	tb.b.t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	res, err := tb.b.call(tb.ctx, tb.session, method, params)
	if err != nil {
		tb.b.t.Fatal(err)
	}
	return res
}

func (tb *tab) navigate(url string) {
	tb.b.t.Helper()
	res := tb.do("Page.navigate", map[string]any{"url": url})
	var r struct {
		ErrorText string `json:"errorText"`
	}
	if _ = json.Unmarshal(res, &r); r.ErrorText != "" {
		tb.b.t.Fatalf("navigating to %s: %s", url, r.ErrorText)
	}
}

// eval runs a JavaScript expression in the page, awaits it when it is a
// promise, and decodes its value into v (when v is not nil).
func (tb *tab) eval(expr string, v any) {
	tb.b.t.Helper()
	res := tb.do("Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true})
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		tb.b.t.Fatal(err)
	}
	if r.ExceptionDetails != nil {
		tb.b.t.Fatalf("evaluating %s: %s %s", expr, r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if v != nil {
		if err := json.Unmarshal(r.Result.Value, v); err != nil {
			tb.b.t.Fatalf("evaluating %s: value %s: %v", expr, r.Result.Value, err)
		}
	}
}

// waitFor waits, inside the page, until the JavaScript condition holds;
// it fails the test with the page's status and error after 15 s. The page
// is polled every 10 ms: no fixed sleeps.
func (tb *tab) waitFor(cond string) {
	tb.b.t.Helper()
	tb.eval(`new Promise((resolve, reject) => {
		const start = Date.now();
		const check = () => {
			let ok = false;
			try { ok = !!(`+cond+`); } catch (e) {}
			if (ok) return resolve(true);
			if (Date.now() - start > 15000) {
				const err = document.getElementById('error');
				return reject(new Error('timed out waiting for: `+strings.ReplaceAll(cond, "'", "\\'")+
		` (status ' + (document.body && document.body.dataset.status) + ', error ' + (err && err.textContent) + ')'));
			}
			setTimeout(check, 10);
		};
		check();
	})`, nil)
}

// key presses and releases one key, as a person typing would: the page
// sees keydown with e.key.
func (tb *tab) key(key string) {
	tb.b.t.Helper()
	down := map[string]any{"type": "keyDown", "key": key}
	switch key {
	case "Enter":
		down["code"], down["windowsVirtualKeyCode"], down["text"] = "Enter", 13, "\r"
	case "Escape":
		down["code"], down["windowsVirtualKeyCode"] = "Escape", 27
		down["type"] = "rawKeyDown"
	default:
		down["text"] = key
	}
	tb.do("Input.dispatchKeyEvent", down)
	tb.do("Input.dispatchKeyEvent", map[string]any{"type": "keyUp", "key": key})
}

// click clicks the middle of the first element matching selector with
// the mouse.
func (tb *tab) click(selector string) {
	tb.b.t.Helper()
	var pos struct{ X, Y float64 }
	tb.eval(`(() => {
		const e = document.querySelector(`+jsString(selector)+`);
		if (!e) throw new Error('no element '+`+jsString(selector)+`);
		e.scrollIntoView({block: 'center'});
		const r = e.getBoundingClientRect();
		return {X: r.left + r.width / 2, Y: r.top + r.height / 2};
	})()`, &pos)
	for _, typ := range []string{"mousePressed", "mouseReleased"} {
		tb.do("Input.dispatchMouseEvent", map[string]any{"type": typ, "x": pos.X, "y": pos.Y, "button": "left", "clickCount": 1})
	}
}

// typeText types text into the focused element.
func (tb *tab) typeText(text string) {
	tb.b.t.Helper()
	tb.do("Input.insertText", map[string]any{"text": text})
}

// noProblems fails the test when the page threw or logged an error.
func (b *browser) noProblems() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		b.t.Errorf("page: %s", p)
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
