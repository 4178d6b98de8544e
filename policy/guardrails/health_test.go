package guardrails

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/systemone/systemone-gateway/internal/faultproxy"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/wait"
)

// TestTimeoutIsTheServiceFailing: a check whose call to the service gets
// no answer within the timeout is the service failing, not its caller
// going away, though the check's context ends with it (at the same
// instant as the call's, or, counted from the call's start, before it).
// Here the verdict cache's lookup takes about 40ms before the call (Redis
// behind a proxy adding 20ms each way), as a distant Redis or a busy
// machine makes it. Each of ten faults is one check, alone with its call,
// that times out: each logs "guardrails service failing" once, and a
// passing check after it "answering again" once.
func TestTimeoutIsTheServiceFailing(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	proxy.Latency(20*time.Millisecond, 20*time.Millisecond)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	svc := newService(t, nil)
	core, logs := observer.New(zapcore.InfoLevel)
	const timeout = 150 * time.Millisecond
	c, err := New(Config{URL: svc.URL, APIKey: testKey, Timeout: caddy.Duration(timeout), Cache: caddy.Duration(time.Minute)}, rdb, "p:", zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	check := func() Verdict {
		n++
		return c.Check(context.Background(), fmt.Appendf(nil, `"text %d"`, n)) // each its own call
	}
	for fault := 1; fault <= 10; fault++ {
		svc.setReply(svc.hang)
		if v := check(); !errors.Is(v.Err, ErrTimeout) {
			t.Fatalf("fault %d: %+v, want a timeout", fault, v)
		}
		if got := logs.FilterMessage("guardrails service failing").Len(); got != fault {
			t.Fatalf("%d \"guardrails service failing\" entries after %d faults, each a timeout, want one per fault", got, fault)
		}
		svc.setReply(answer(passAnswer))
		// Until one passes: on a busy machine a check may time out here
		// too, which leaves the service failing, and logs nothing more.
		wait.Until(t, "a check passing", func() bool { return check().Action == ActionPass })
		if got := logs.FilterMessage("guardrails service answering again").Len(); got != fault {
			t.Fatalf("%d \"answering again\" entries after %d faults, want one per fault", got, fault)
		}
	}
}
