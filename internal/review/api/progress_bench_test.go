package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/review/record"
)

// A look at 100,000 stored labels in 100 groups (34 versions by three
// types), through the review API: GET /progress, and `calibrate --json`
// reading GET /labels, as BENCHMARKS.md ("calibrate and /progress")
// measures them. The labels are written straight into a real
// redis-server in the review store's layout (an entry's hash and the
// labeled index), their entries already trimmed from the stream.
//
//	go test -run '^$' -bench 'Progress100k|CalibrateURL100k' -benchtime 3x ./internal/review/api/

// benchStoreLabels writes about n label records in groups groups: entries
// of 1 to 4 questions of one version and type, a day and more old, 5% not
// audited, agreement by group (high, rising with confidence, or below a
// target of 0.9).
func benchStoreLabels(b *testing.B, rdb *redis.Client, groups, n int) {
	b.Helper()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 0xbe7c4))
	base := "systemone:review:{" + stream + "}:"
	start := time.Now().Add(-30 * 24 * time.Hour)
	pipe := rdb.Pipeline()
	lines := 0
	for e := 0; lines < n; e++ {
		g := r.IntN(groups)
		at := start.Add(time.Duration(e) * 25 * time.Second)
		id := record.ID{Ms: uint64(at.UnixMilli())}
		conf := math.Sqrt(r.Float64())
		fields := []any{}
		for j := range 1 + r.IntN(4) {
			c := math.Round(min(max(conf+0.05*r.NormFloat64(), 0), 1)*100) / 100
			agree := r.Float64() < []float64{0.97, 0.70 + 0.28*c, 0.85}[g%3]
			l := record.Label{Entry: id.String(), RequestID: "r" + strconv.Itoa(e), Org: "org-" + strconv.Itoa(e%3),
				Model: fmt.Sprintf("svc-%02d", g/3), Type: []string{"noul", "choice", "score"}[g%3], Question: "q" + strconv.Itoa(j),
				Confidence: &c, Answer: json.RawMessage(`0.8`), Label: json.RawMessage(strconv.FormatBool(agree)), Agree: agree,
				Audit: r.IntN(20) != 0, Route: "auto", Reviewer: "ana", TS: at.Add(time.Hour).UTC().Format(time.RFC3339Nano)}
			text, err := l.Marshal()
			if err != nil {
				b.Fatal(err)
			}
			fields = append(fields, l.Question, string(text))
			lines++
		}
		pipe.HSet(ctx, base+"entry:"+id.String(), fields...)
		pipe.ZAdd(ctx, base+"labeled", redis.Z{Member: fmt.Sprintf("%020d-%020d", id.Ms, id.Seq)})
		if e%1000 == 999 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
}

// benchReview serves only the review API over a real redis-server holding
// 100,000 labels, and returns its URL and the server.
func benchReview(b *testing.B) (string, *redistest.Server) {
	rs := redistest.Start(b)
	port := gatewaytest.FreePort(b)
	gatewaytest.Load(b, fmt.Sprintf(`:%d {
	handle_path /review/* {
		systemone_review {
			redis %s
			stream %s
		}
	}
}
`, port, rs.URL(), stream))
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	b.Cleanup(func() { _ = rdb.Close() })
	benchStoreLabels(b, rdb, 100, 100_000)
	return fmt.Sprintf("http://127.0.0.1:%d/review", port), rs
}

// processCPU is this process's CPU time, user and system: the gateway's
// and the command's (both run in it), where the wall time on a shared
// machine says little.
func processCPU() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// measure runs op b.N times and reports the CPU seconds of this process
// and of redis-server per operation.
func measure(b *testing.B, rs *redistest.Server, op func()) {
	cpu, redisCPU := processCPU(), redistest.CPUSeconds(b, rs.Addr)
	for b.Loop() {
		op()
	}
	b.ReportMetric((processCPU()-cpu).Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric((redistest.CPUSeconds(b, rs.Addr)-redisCPU)/float64(b.N), "redis-cpu-s/op")
}

// BenchmarkProgress100kLines is GET /progress?target=0.9 over 100,000
// stored labels.
func BenchmarkProgress100kLines(b *testing.B) {
	url, rs := benchReview(b)
	measure(b, rs, func() {
		resp, err := http.Get(url + "/progress?target=0.9")
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"threshold": 0.`)) {
			b.Fatalf("%d %.300s", resp.StatusCode, body)
		}
	})
}

// BenchmarkCalibrateURL100kLines is `calibrate --target 0.9 --json
// <review>/labels` over 100,000 stored labels: the export read over HTTP.
func BenchmarkCalibrateURL100kLines(b *testing.B) {
	url, rs := benchReview(b)
	measure(b, rs, func() {
		if out := calibrateJSON(b, "--target", "0.9", "--json", url+"/labels"); !strings.Contains(out, `"threshold": 0.`) {
			b.Fatalf("%.300s", out)
		}
	})
}
