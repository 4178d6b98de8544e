package route

import (
	"net/http"
	"testing"

	"github.com/systemone/systemone-gateway/evaluation"
)

func TestSetHeaders(t *testing.T) {
	r := newRouter(t, testConfig())
	qs := []evaluation.Question{q("a,b", "choice"), q("x=y", "noul"), q("has space", "score"), q("中文", "choice"), q("ok-._~9Z", "choice"), q("100%", "choice")}
	b := body("service-1.0.0",
		choice("a,b", "0.5"), noul("x=y", "0.6"), score("has space", "0.706"), `"\u4e2d\u6587":{"type":"choice","confidence":1}`,
		choice("ok-._~9Z", "0.49"), choice("100%", "0.5"))
	d := decideBody(r, qs, b, Signal{})

	h := http.Header{}
	// An upstream that sends the gateway's headers must not have them pass.
	h.Add("X-Route", "auto")
	h.Add("X-Route", "auto")
	h.Set("X-Route-Reason", "confident")
	h.Set("X-Route-Model", "forged")
	h.Set("X-Route-Confidence", "1.00")
	h.Set("X-Route-Questions", "a=auto")
	h.Set("X-Request-Id", "keep")
	d.SetHeaders(h)

	want := map[string]string{
		"X-Route":            "human",
		"X-Route-Reason":     "low_confidence",
		"X-Route-Model":      "service-1.0.0",
		"X-Route-Confidence": "0.20",
		"X-Route-Questions":  "a%2Cb=auto, x%3Dy=human, has%20space=auto, %E4%B8%AD%E6%96%87=auto, ok-._~9Z=human, 100%25=auto",
		"X-Request-Id":       "keep",
	}
	for name, v := range want {
		if got := h.Values(name); len(got) != 1 || got[0] != v {
			t.Errorf("%s: %q, want [%q]", name, got, v)
		}
	}
	if len(h) != len(want) {
		t.Errorf("headers %v, want exactly %v", h, want)
	}
}

func TestSetHeadersUnknowns(t *testing.T) {
	r := newRouter(t, testConfig())
	h := http.Header{}
	h.Set("X-Route-Model", "forged")
	h.Set("X-Route-Confidence", "0.99")
	r.Decide([]evaluation.Question{q("a", "noul")}, nil, Signal{}).SetHeaders(h)
	if h.Get("X-Route") != "human" || h.Get("X-Route-Reason") != "unreadable_response" || h.Get("X-Route-Questions") != "a=human" {
		t.Errorf("headers %v", h)
	}
	for _, name := range []string{"X-Route-Model", "X-Route-Confidence"} {
		if v, ok := h[name]; ok {
			t.Errorf("%s: %q, want it absent when unknown", name, v)
		}
	}

	// A version a header value cannot carry is left out, not mangled.
	h = http.Header{}
	decideBody(r, []evaluation.Question{q("a", "noul")}, body(`v\r\nSet-Cookie: x=1`, noul("a", "1")), Signal{}).SetHeaders(h)
	if v, ok := h["X-Route-Model"]; ok || h.Get("X-Route-Reason") != "unpinned_version" {
		t.Errorf("model header %q, reason %q", v, h.Get("X-Route-Reason"))
	}
}

func TestConfidenceHeaderTwoDecimals(t *testing.T) {
	for conf, want := range map[float64]string{0: "0.00", 1: "1.00", 0.7: "0.70", 0.994: "0.99", 0.996: "1.00", 0.125: "0.12", 0.126: "0.13"} {
		h := http.Header{}
		Decision{Route: "auto", Reason: "confident", MinConfidence: conf, HasMinConfidence: true}.SetHeaders(h)
		if got := h.Get("X-Route-Confidence"); got != want {
			t.Errorf("confidence %v: header %q, want %q", conf, got, want)
		}
	}
}
