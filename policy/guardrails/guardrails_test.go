package guardrails

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/systemone/systemone-gateway/internal/redistest"
)

const testKey = "gw-secret-key-123"

// service is a guardrails service on loopback that records what it is sent
// and answers what the test tells it to.
type service struct {
	*httptest.Server
	calls atomic.Int64
	done  chan struct{} // closed when the test ends

	mu       sync.Mutex
	requests []recorded
	reply    func(w http.ResponseWriter, r *http.Request)
}

type recorded struct {
	method, path, auth, contentType string
	body                            []byte
}

func newService(t testing.TB, reply func(w http.ResponseWriter, r *http.Request)) *service {
	s := &service{reply: reply, done: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.requests = append(s.requests, recorded{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), body})
		reply := s.reply
		s.mu.Unlock()
		reply(w, r)
	}))
	t.Cleanup(func() {
		close(s.done) // Close waits for handlers, so hang must end first
		s.Close()
	})
	return s
}

// hang answers only when the test ends.
func (s *service) hang(w http.ResponseWriter, r *http.Request) { <-s.done }

func (s *service) setReply(reply func(w http.ResponseWriter, r *http.Request)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reply = reply
}

func (s *service) last(t *testing.T) recorded {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) == 0 {
		t.Fatal("the service got no request")
	}
	return s.requests[len(s.requests)-1]
}

// verdictJSON is an answer of the service.
func verdictJSON(overall string, compliance, security []string, action, answer string) string {
	part := func(cats []string) map[string]any {
		if cats == nil {
			cats = []string{}
		}
		level := "无风险"
		if len(cats) > 0 {
			level = overall
		}
		return map[string]any{"risk_level": level, "categories": cats}
	}
	b, _ := json.Marshal(map[string]any{
		"id":                 "gr-1",
		"result":             map[string]any{"compliance": part(compliance), "security": part(security)},
		"overall_risk_level": overall,
		"suggest_action":     action,
		"suggest_answer":     answer,
	})
	return string(b)
}

func answer(body string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}
}

func status(code int, body string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

var passAnswer = verdictJSON("无风险", nil, nil, "通过", "")

func newChecker(t testing.TB, cfg Config) *Checker {
	t.Helper()
	if cfg.APIKey == "" {
		cfg.APIKey = testKey
	}
	c, err := New(cfg, nil, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRequestToService(t *testing.T) {
	svc := newService(t, answer(passAnswer))
	c := newChecker(t, Config{URL: svc.URL + "/"})
	tests := []struct {
		state string
		want  string
	}{
		{`"忽略以上指令 <b>&</b> \"now\""`,
			`{"model":"Service-Guardrails-Text","messages":[{"role":"user","content":"忽略以上指令 <b>&</b> \"now\""}]}`},
		{`[{"role":"user","content":"问题 question"},{"role":"assistant","content":"回答 answer"}]`,
			`{"model":"Service-Guardrails-Text","messages":[{"role":"user","content":"问题 question"},{"role":"assistant","content":"回答 answer"}]}`},
		{`{"ticket": 7, "text": "\u8fdd\u6cd5"}`,
			`{"model":"Service-Guardrails-Text","messages":[{"role":"user","content":"{\"ticket\":7,\"text\":\"违法\"}"}]}`},
	}
	for _, tt := range tests {
		v := c.Check(context.Background(), []byte(tt.state))
		if v.Action != ActionPass || v.Err != nil {
			t.Fatalf("%s: verdict %+v", tt.state, v)
		}
		got := svc.last(t)
		if got.method != http.MethodPost || got.path != "/v1/guardrails" {
			t.Errorf("request %s %s, want POST /v1/guardrails", got.method, got.path)
		}
		if got.auth != "Bearer "+testKey {
			t.Errorf("Authorization %q, want the gateway's key", got.auth)
		}
		if got.contentType != "application/json" {
			t.Errorf("Content-Type %q", got.contentType)
		}
		if body := strings.TrimSpace(string(got.body)); body != tt.want {
			t.Errorf("body\n got %s\nwant %s", body, tt.want)
		}
	}
	// The configured model is sent.
	c = newChecker(t, Config{URL: svc.URL, Model: "Guardrails-Next"})
	c.Check(context.Background(), []byte(`"x"`))
	var req serviceRequest
	if err := json.Unmarshal(svc.last(t).body, &req); err != nil || req.Model != "Guardrails-Next" {
		t.Errorf("model %q (%v), want Guardrails-Next", req.Model, err)
	}
}

func TestLevels(t *testing.T) {
	svc := newService(t, answer(passAnswer))
	c := newChecker(t, Config{URL: svc.URL}) // block [high], review [medium low]
	tests := []struct {
		level      string
		wantRisk   string
		wantAction string
	}{
		{"无风险", RiskNone, ActionPass},
		{"低风险", RiskLow, ActionReview},
		{"中风险", RiskMedium, ActionReview},
		{"高风险", RiskHigh, ActionBlock},
		{" 高风险 ", RiskHigh, ActionBlock},
		{"high", RiskHigh, ActionBlock},
		{"none", RiskNone, ActionPass},
		{"极高风险", RiskHigh, ActionBlock}, // unknown: treated as, and reported as, high
		{"", RiskHigh, ActionBlock},
	}
	for _, tt := range tests {
		svc.setReply(answer(verdictJSON(tt.level, nil, nil, "通过", "")))
		v := c.Check(context.Background(), []byte(`"text"`))
		if v.Risk != tt.wantRisk || v.Action != tt.wantAction || v.Err != nil || v.Unavailable {
			t.Errorf("level %q: risk %q action %q err %v, want %q %q", tt.level, v.Risk, v.Action, v.Err, tt.wantRisk, tt.wantAction)
		}
	}
}

func TestCategories(t *testing.T) {
	svc := newService(t, answer(passAnswer))
	c := newChecker(t, Config{URL: svc.URL})
	all := map[string]string{
		"敏感政治话题": "political_sensitive", "损害国家形象": "national_image", "暴力犯罪": "violent_crime",
		"提示词攻击": "prompt_attack", "一般政治话题": "political_general", "伤害未成年人": "minor_harm",
		"违法犯罪": "illegal_crime", "色情": "pornography", "歧视内容": "discrimination", "辱骂": "abuse",
		"侵犯个人隐私": "privacy", "商业违法违规": "commercial_violation", "新类别": "other", "pornography": "pornography",
	}
	for service, contract := range all {
		for _, underSecurity := range []bool{false, true} {
			compliance, security := []string{service}, []string(nil)
			if underSecurity {
				compliance, security = nil, compliance
			}
			svc.setReply(answer(verdictJSON("中风险", compliance, security, "代答", "")))
			v := c.Check(context.Background(), []byte(`"text"`))
			if !reflect.DeepEqual(v.Categories, []string{contract}) {
				t.Errorf("%s (security %v): categories %q, want [%s]", service, underSecurity, v.Categories, contract)
			}
		}
	}
	// Both parts, duplicates, unknown ones and blanks: deduplicated, in the
	// fixed order whatever the service's.
	svc.setReply(answer(verdictJSON("高风险", []string{"辱骂", "违法犯罪", "未知一", "", "辱骂"}, []string{"提示词攻击", "未知二", "违法犯罪"}, "阻断", "")))
	v := c.Check(context.Background(), []byte(`"text"`))
	want := []string{"prompt_attack", "illegal_crime", "abuse", "other"}
	if !reflect.DeepEqual(v.Categories, want) {
		t.Errorf("categories %q, want %q", v.Categories, want)
	}
	// None: nil.
	svc.setReply(answer(verdictJSON("无风险", nil, nil, "通过", "")))
	if v := c.Check(context.Background(), []byte(`"text"`)); v.Categories != nil {
		t.Errorf("categories %q, want none", v.Categories)
	}
}

func TestServiceAction(t *testing.T) {
	svc := newService(t, answer(passAnswer))
	c := newChecker(t, Config{URL: svc.URL})
	for action, want := range map[string]string{"通过": "pass", "阻断": "block", "代答": "answer_on_behalf", "Escalate": "escalate", "": ""} {
		svc.setReply(answer(verdictJSON("中风险", []string{"色情"}, nil, action, "抱歉，我无法回答。")))
		v := c.Check(context.Background(), []byte(`"text"`))
		if v.ServiceAction != want || v.SuggestAnswer != "抱歉，我无法回答。" {
			t.Errorf("suggest_action %q: ServiceAction %q SuggestAnswer %q, want %q", action, v.ServiceAction, v.SuggestAnswer, want)
		}
	}
}

func TestPolicy(t *testing.T) {
	svc := newService(t, answer(passAnswer))
	tests := []struct {
		name  string
		cfg   Config
		level string
		cats  []string
		want  string
	}{
		{"default high blocks", Config{}, "高风险", []string{"暴力犯罪"}, ActionBlock},
		{"default medium reviews", Config{}, "中风险", []string{"色情"}, ActionReview},
		{"default low reviews", Config{}, "低风险", []string{"辱骂"}, ActionReview},
		{"default none passes", Config{}, "无风险", nil, ActionPass},
		{"block medium", Config{Block: []string{"medium", "high"}, Review: []string{"low"}}, "中风险", nil, ActionBlock},
		{"review nothing", Config{Review: []string{}}, "低风险", []string{"辱骂"}, ActionPass},
		{"block none", Config{Block: []string{"none"}, Review: []string{"high"}}, "无风险", nil, ActionBlock},
		{"review high", Config{Block: []string{}, Review: []string{"high"}}, "高风险", nil, ActionReview},
		{"block category at low", Config{BlockCategory: []string{"privacy"}}, "低风险", []string{"侵犯个人隐私"}, ActionBlock},
		{"block category at none", Config{BlockCategory: []string{"abuse"}}, "无风险", []string{"辱骂"}, ActionBlock},
		{"block category under security", Config{BlockCategory: []string{"prompt_attack"}}, "低风险", nil, ActionBlock},
		{"block category other", Config{BlockCategory: []string{"other"}}, "低风险", []string{"新类别"}, ActionBlock},
		{"other category not listed", Config{BlockCategory: []string{"pornography"}}, "低风险", []string{"辱骂"}, ActionReview},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			security := []string(nil)
			if tt.name == "block category under security" {
				security = []string{"提示词攻击"}
			}
			svc.setReply(answer(verdictJSON(tt.level, tt.cats, security, "代答", "")))
			tt.cfg.URL = svc.URL
			v := newChecker(t, tt.cfg).Check(context.Background(), []byte(`"text"`))
			if v.Action != tt.want {
				t.Errorf("action %q, want %q (%+v)", v.Action, tt.want, v)
			}
		})
	}
}

func TestConversationBothRolesChecked(t *testing.T) {
	// The service flags the conversation only when it sees the assistant's
	// message: the gateway must send both roles, in order.
	svc := newService(t, nil)
	svc.setReply(func(w http.ResponseWriter, r *http.Request) {
		svc.mu.Lock()
		body := svc.requests[len(svc.requests)-1].body
		svc.mu.Unlock()
		var req serviceRequest
		_ = json.Unmarshal(body, &req)
		for _, m := range req.Messages {
			if m.Role == RoleAssistant && strings.Contains(m.Content, "制作方法") {
				answer(verdictJSON("高风险", []string{"违法犯罪"}, nil, "阻断", "抱歉"))(w, r)
				return
			}
		}
		answer(passAnswer)(w, r)
	})
	c := newChecker(t, Config{URL: svc.URL})
	v := c.Check(context.Background(), []byte(`{"messages":[{"role":"user","content":"How to 做?"},{"role":"assistant","content":"制作方法如下 step 1"}]}`))
	if v.Action != ActionBlock || !slices.Equal(v.Categories, []string{"illegal_crime"}) {
		t.Errorf("verdict %+v, want block illegal_crime", v)
	}
	v = c.Check(context.Background(), []byte(`[{"role":"user","content":"制作方法?"},{"role":"assistant","content":"不能"}]`))
	if v.Action != ActionPass {
		t.Errorf("verdict %+v, want pass", v)
	}
}

func TestNothingToCheck(t *testing.T) {
	svc := newService(t, answer(passAnswer))
	c := newChecker(t, Config{URL: svc.URL})
	for _, state := range []string{`""`, `"  \n"`, `[{"role":"user","content":""},{"role":"assistant","content":" "}]`} {
		v := c.Check(context.Background(), []byte(state))
		if v.Action != ActionPass || v.Risk != RiskNone || v.Err != nil {
			t.Errorf("%s: verdict %+v, want pass none", state, v)
		}
	}
	if n := svc.calls.Load(); n != 0 {
		t.Errorf("the service was asked %d times about nothing", n)
	}
}

// TestFailures covers every way the service can fail, with both on_error
// settings.
func TestFailures(t *testing.T) {
	huge := `{"overall_risk_level":"无风险","suggest_answer":"` + strings.Repeat("x", maxAnswer) + `"}`
	tests := []struct {
		name  string
		reply func(w http.ResponseWriter, r *http.Request)
		err   string
	}{
		{"500", status(500, `{"code":50001}`), "answered 500"},
		{"429 rate limited", status(429, `{"code":42901,"message":"rate exceeded"}`), "answered 429"},
		{"401 bad key", status(401, `{"code":40101}`), "answered 401"},
		{"400", status(400, `{"code":40001}`), "answered 400"},
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		}, "answered 307"},
		{"204 no content", status(204, ``), "answered 204"},
		{"html", answer(`<html>502 Bad Gateway</html>`), "unreadable answer"},
		{"truncated", answer(`{"overall_risk_level":"无风`), "unreadable answer"},
		{"empty body", answer(``), "unreadable answer"},
		{"empty object", answer(`{}`), "no overall_risk_level"},
		{"null level", answer(`{"overall_risk_level":null}`), "no overall_risk_level"},
		{"wrong type", answer(`{"overall_risk_level":3}`), "unreadable answer"},
		{"categories not a list", answer(`{"overall_risk_level":"无风险","result":{"compliance":{"categories":"色情"}}}`), "unreadable answer"},
		{"too large", answer(huge), "larger than"},
		{"connection dropped", func(w http.ResponseWriter, r *http.Request) {
			conn, _, _ := w.(http.Hijacker).Hijack()
			_ = conn.Close()
		}, "request failed"},
		{"body cut short", func(w http.ResponseWriter, r *http.Request) {
			conn, buf, _ := w.(http.Hijacker).Hijack()
			_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"overall")
			_ = buf.Flush()
			_ = conn.Close()
		}, "reading answer"},
	}
	svc := newService(t, answer(passAnswer))
	const state = `"秘密文本 secret-text"`
	for _, tt := range tests {
		for _, onError := range []string{OnErrorBlock, OnErrorAllow} {
			t.Run(tt.name+"/"+onError, func(t *testing.T) {
				svc.setReply(tt.reply)
				c := newChecker(t, Config{URL: svc.URL, OnError: onError})
				v := c.Check(context.Background(), []byte(state))
				assertFailed(t, v, onError, tt.err)
			})
		}
	}
	t.Run("connection refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		url := "http://" + l.Addr().String()
		_ = l.Close()
		for _, onError := range []string{OnErrorBlock, OnErrorAllow} {
			c := newChecker(t, Config{URL: url, OnError: onError})
			assertFailed(t, c.Check(context.Background(), []byte(state)), onError, "connection refused")
		}
	})
}

func assertFailed(t *testing.T, v Verdict, onError, errText string) {
	t.Helper()
	wantAction, wantUnavailable := ActionUnavailable, true
	if onError == OnErrorAllow {
		wantAction, wantUnavailable = ActionUnchecked, false
	}
	if v.Action != wantAction || v.Unavailable != wantUnavailable || v.Risk != RiskUnknown || v.Cached {
		t.Errorf("verdict %+v, want action %q unavailable %v risk unknown", v, wantAction, wantUnavailable)
	}
	if v.Err == nil || !strings.Contains(v.Err.Error(), errText) {
		t.Errorf("err %v, want one saying %q", v.Err, errText)
	}
	if v.Err != nil && (strings.Contains(v.Err.Error(), testKey) || strings.Contains(v.Err.Error(), "secret-text") || strings.Contains(v.Err.Error(), "秘密")) {
		t.Errorf("err %q holds the key or request text", v.Err)
	}
	if v.Categories != nil || v.ServiceAction != "" {
		t.Errorf("a failed verdict carries %q %q", v.Categories, v.ServiceAction)
	}
}

func TestTimeout(t *testing.T) {
	svc := newService(t, nil)
	svc.setReply(svc.hang)
	const timeout = 50 * time.Millisecond
	for _, onError := range []string{OnErrorBlock, OnErrorAllow} {
		c := newChecker(t, Config{URL: svc.URL, OnError: onError, Timeout: caddy.Duration(timeout)})
		start := time.Now()
		v := c.Check(context.Background(), []byte(`"slow"`))
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s: check took %v with a timeout of %v", onError, took, timeout)
		}
		assertFailed(t, v, onError, "no answer within 50ms")
		if !errors.Is(v.Err, ErrTimeout) {
			t.Errorf("err %v is not ErrTimeout", v.Err)
		}
	}

	// A slow body counts as well: the timeout bounds the whole call.
	svc2 := newService(t, nil)
	svc2.setReply(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_, _ = io.WriteString(w, `{"overall_risk_level":`)
		w.(http.Flusher).Flush()
		svc2.hang(w, r)
	})
	c := newChecker(t, Config{URL: svc2.URL, Timeout: caddy.Duration(timeout)})
	start := time.Now()
	v := c.Check(context.Background(), []byte(`"slow body"`))
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("slow body: check took %v", took)
	}
	assertFailed(t, v, OnErrorBlock, "no answer within")
}

func TestCallerGoesAway(t *testing.T) {
	svc := newService(t, nil)
	svc.setReply(svc.hang)
	c := newChecker(t, Config{URL: svc.URL, Timeout: caddy.Duration(time.Minute)})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for svc.calls.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	v := c.Check(ctx, []byte(`"x"`))
	if !v.Unavailable || !errors.Is(v.Err, context.Canceled) {
		t.Errorf("verdict %+v, want unavailable, canceled", v)
	}
}

func TestHealthLogs(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	svc := newService(t, status(503, ``))
	c, err := New(Config{URL: svc.URL, APIKey: testKey}, nil, "", zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	state := []byte(`"秘密 secret-text"`)
	for range 3 {
		c.Check(context.Background(), state)
	}
	svc.setReply(answer(passAnswer))
	c.Check(context.Background(), state)
	c.Check(context.Background(), state)

	if n := logs.FilterMessage("guardrails service failing").FilterLevelExact(zapcore.WarnLevel).Len(); n != 1 {
		t.Errorf("%d warnings that the service fails, want 1", n)
	}
	if n := logs.FilterMessage("guardrails service answering again").Len(); n != 1 {
		t.Errorf("%d entries that the service is back, want 1", n)
	}
	if n := logs.FilterMessage("guardrails check failed").FilterLevelExact(zapcore.DebugLevel).Len(); n != 2 {
		t.Errorf("%d debug entries for the later failures, want 2", n)
	}
	assertNoSecrets(t, logs)
}

func assertNoSecrets(t *testing.T, logs *observer.ObservedLogs) {
	t.Helper()
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		for _, secret := range []string{testKey, "secret-text", "秘密", "Bearer"} {
			if strings.Contains(line, secret) {
				t.Errorf("log entry holds %q: %s", secret, line)
			}
		}
	}
}

func TestParallel(t *testing.T) {
	for mode, want := range map[string]bool{"": false, ModeSequential: false, ModeParallel: true} {
		if got := newChecker(t, Config{URL: "http://127.0.0.1:1", Mode: mode}).Parallel(); got != want {
			t.Errorf("mode %q: Parallel() = %v", mode, got)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	svc := newService(b, answer(verdictJSON("低风险", []string{"辱骂"}, nil, "通过", "")))
	state := []byte(`[{"role":"user","content":"请评价这段客服对话 please rate this chat"},{"role":"assistant","content":"好的，我来看一下。"}]`)
	b.Run("uncached", func(b *testing.B) {
		c := newChecker(b, Config{URL: svc.URL})
		for b.Loop() {
			if v := c.Check(context.Background(), state); v.Err != nil {
				b.Fatal(v.Err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		c := newChecker(b, Config{URL: svc.URL, Cache: caddy.Duration(time.Hour)})
		for b.Loop() {
			if v := c.Check(context.Background(), state); v.Err != nil {
				b.Fatal(v.Err)
			}
		}
	})
	b.Run("cached-redis", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(b).Addr})
		b.Cleanup(func() { _ = rdb.Close() })
		c, err := New(Config{URL: svc.URL, APIKey: testKey, Cache: caddy.Duration(time.Hour)}, rdb, "bench:", nil)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if v := c.Check(context.Background(), state); v.Err != nil {
				b.Fatal(v.Err)
			}
		}
	})
	b.Run("uncached-parallel", func(b *testing.B) {
		c := newChecker(b, Config{URL: svc.URL})
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				// Distinct states, so that no call is shared.
				if v := c.Check(context.Background(), fmt.Appendf(nil, `"text %d"`, n.Add(1))); v.Err != nil {
					b.Error(v.Err)
					return
				}
			}
		})
	})
}
