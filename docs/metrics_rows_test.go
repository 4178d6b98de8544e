package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// A metric the code registers: prometheus options with the systemone
	// namespace, or a descriptor of a collector.
	optsName  = regexp.MustCompile(`Namespace:\s*(?:namespace|"systemone"),\s*Name:\s*"([a-z_]+)"`)
	descName  = regexp.MustCompile(`NewDesc\(\s*"(systemone_[a-z_]+)"`)
	alertName = regexp.MustCompile(`(?m)^\s*- alert:\s*(\S+)`)
)

// TestEveryMetricAndAlertHasARow: each metric the code registers and each
// rule of deploy/prometheus/alerts.yml has its row in
// metrics-and-alerts.md, so that an operator reading an alert or a series
// finds what it means and what to do.
func TestEveryMetricAndAlertHasARow(t *testing.T) {
	doc, err := os.ReadFile("metrics-and-alerts.md")
	if err != nil {
		t.Fatal(err)
	}
	hasRow := func(name string) bool {
		return regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(name) + "`").Match(doc)
	}

	metrics := map[string]string{} // name -> file registering it
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range optsName.FindAllSubmatch(src, -1) {
			metrics["systemone_"+string(m[1])] = path
		}
		for _, m := range descName.FindAllSubmatch(src, -1) {
			metrics[string(m[1])] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The guarantee's gauges are among them: the collection reads the
	// code, not a list that could go stale with it.
	for _, want := range []string{"systemone_requests_total", "systemone_redis_up", "systemone_guarantee_alarm", "systemone_guarantee_evidence", "systemone_review_labels_total"} {
		if metrics[want] == "" {
			t.Errorf("the code's metrics %v lack %s: the collection misses a way of registering", metrics, want)
		}
	}
	for name, path := range metrics {
		if !hasRow(name) {
			t.Errorf("metric %s (registered in %s) has no row in metrics-and-alerts.md", name, path)
		}
	}

	rules, err := os.ReadFile(filepath.Join(root, "deploy/prometheus/alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := alertName.FindAllSubmatch(rules, -1)
	if len(alerts) < 8 {
		t.Fatalf("%d alerts read from alerts.yml", len(alerts))
	}
	for _, m := range alerts {
		if !hasRow(string(m[1])) {
			t.Errorf("alert %s of deploy/prometheus/alerts.yml has no row in metrics-and-alerts.md", m[1])
		}
	}
}
