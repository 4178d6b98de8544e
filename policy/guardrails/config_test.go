package guardrails

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

func TestConfigDefaults(t *testing.T) {
	c, err := New(Config{URL: "https://guardrails.example/", APIKey: "k"}, nil, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		URL: "https://guardrails.example/", APIKey: "k", Model: "Service-Guardrails-Text",
		Timeout: caddy.Duration(2 * time.Second), Block: []string{"high"}, Review: []string{"medium", "low"},
		OnError: "block", Mode: "sequential",
	}
	if !reflect.DeepEqual(c.cfg, want) {
		t.Errorf("defaults\n got %+v\nwant %+v", c.cfg, want)
	}
	if c.endpoint != "https://guardrails.example/v1/guardrails" {
		t.Errorf("endpoint %q", c.endpoint)
	}
	if c.cache != nil || c.Parallel() {
		t.Error("cache on or parallel by default")
	}
}

func TestConfigInvalid(t *testing.T) {
	valid := Config{URL: "http://127.0.0.1:9090/base", APIKey: "k"}
	tests := []struct {
		name   string
		change func(*Config)
		err    string
	}{
		{"no url", func(c *Config) { c.URL = "" }, "url is required"},
		{"bad scheme", func(c *Config) { c.URL = "ftp://x" }, "http:// or https://"},
		{"no host", func(c *Config) { c.URL = "http://" }, "with a host"},
		{"relative", func(c *Config) { c.URL = "guardrails:8080" }, "http:// or https://"},
		{"unparsable", func(c *Config) { c.URL = "http://[::1" }, "url"},
		{"credentials", func(c *Config) { c.URL = "http://u:p@host" }, "credentials"},
		{"query", func(c *Config) { c.URL = "http://host/?key=1" }, "query"},
		{"no key", func(c *Config) { c.APIKey = "" }, "api_key is required"},
		{"negative timeout", func(c *Config) { c.Timeout = -1 }, "timeout"},
		{"negative cache", func(c *Config) { c.Cache = -1 }, "cache"},
		{"bad block level", func(c *Config) { c.Block = []string{"severe"} }, `"severe"`},
		{"service level", func(c *Config) { c.Review = []string{"高风险"} }, "must be one of none low medium high"},
		{"level in both", func(c *Config) { c.Block, c.Review = []string{"high", "medium"}, []string{"medium"} }, `"medium" is in both`},
		{"bad category", func(c *Config) { c.BlockCategory = []string{"色情"} }, "block_category"},
		{"bad on_error", func(c *Config) { c.OnError = "deny" }, "on_error"},
		{"bad mode", func(c *Config) { c.Mode = "async" }, "mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid
			tt.change(&cfg)
			_, err := New(cfg, nil, "", nil)
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("err %v, want one saying %s", err, tt.err)
			}
		})
	}
	// One list given alone: the other's default gives way to it.
	for _, tc := range []struct {
		block, review       []string
		wantBlock, wantRevw []string
	}{
		{[]string{"medium", "high"}, nil, []string{"medium", "high"}, []string{"low"}},
		{[]string{"low"}, nil, []string{"low"}, []string{"medium"}},
		{nil, []string{"high"}, []string{}, []string{"high"}},
		{nil, []string{"low"}, []string{"high"}, []string{"low"}},
	} {
		cfg := valid
		cfg.Block, cfg.Review = tc.block, tc.review
		got, err := cfg.withDefaults()
		if err != nil || strings.Join(got.Block, " ") != strings.Join(tc.wantBlock, " ") || strings.Join(got.Review, " ") != strings.Join(tc.wantRevw, " ") {
			t.Errorf("block %v review %v: got block %v review %v (%v)", tc.block, tc.review, got.Block, got.Review, err)
		}
	}
	// Every contract category and other are accepted.
	cfg := valid
	cfg.BlockCategory = categoryNames
	if _, err := New(cfg, nil, "", nil); err != nil {
		t.Error(err)
	}
}
