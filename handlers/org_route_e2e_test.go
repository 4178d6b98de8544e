package handlers_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
)

// Certificate ids in orgRoutes.
const (
	certPooledNoul = "0123456789abcdef"
	certStrict     = "fedcba9876543210"
	certAcmeNoul   = "1111111111111111"
)

// orgRoutes pins service-1.0.0 with a certified pooled noul line, an
// uncertified choice line and a certified line for question "strict,q";
// acme has a stricter noul line of its own, hardco's noul must go to
// people. fallback is the org_fallback line, or "".
func orgRoutes(fallback string) string {
	return fmt.Sprintf(`		org_header X-Org-Id
		route {
			pin service-1.0.0 {
				noul 0.8 cert %s
				choice 0.6
				question "strict,q" 0.95 cert %s
				org acme {
					noul 0.9 cert %s
				}
				org hardco {
					noul human
				}
			}
			%s
		}
`, certPooledNoul, certStrict, certAcmeNoul, fallback)
}

// TestOrgRouting runs the real gateway in front of the simulator, one site
// with the default org_fallback (pooled) and one with org_fallback human,
// and follows an org with its own threshold, an org whose own line is
// human, and orgs without a line of their own, through X-Route,
// X-Route-Reason, X-Route-Certificate and the log.
func TestOrgRouting(t *testing.T) {
	sim := unlimitedSimulator(t)
	pooledSite, pooled := site(t, sim.Addr(), orgRoutes(""))
	humanSite, human := site(t, sim.Addr(), orgRoutes("org_fallback human"))
	g := gatewaytest.Load(t, pooledSite+humanSite)

	for _, tc := range []struct {
		name        string
		url, org    string
		body        string
		confidences string // X-Simulator-Confidence: noul p, choice confidence
		route       string
		reason      string
		questions   string
		certificate string // X-Route-Certificate; "" for none
		logged      string // route_certificates
	}{
		// p 0.92 is confidence 0.84: over the pooled 0.8, under acme's 0.9.
		{"acme under its own threshold", pooled, "acme", questionsBody("", "a", "noul"), `{"a":0.92}`,
			"human", "low_confidence", "a=human", "", ""},
		{"another org under the pooled one", pooled, "initech", questionsBody("", "a", "noul"), `{"a":0.92}`,
			"auto", "confident", "a=auto", "a=" + certPooledNoul, certPooledNoul},
		{"acme over its own threshold", pooled, "acme", questionsBody("", "a", "noul"), `{"a":0.97}`,
			"auto", "confident", "a=auto", "a=" + certAcmeNoul, certAcmeNoul},
		{"hardco's own line is human", pooled, "hardco", questionsBody("", "a", "noul"), `{"a":1}`,
			"human", "no_threshold", "a=human", "", ""},
		// hardco has no choice line: the pooled one applies, uncertified.
		{"hardco falls back to the pooled choice line", pooled, "hardco", questionsBody("", "c", "choice"), `{"c":0.7}`,
			"auto", "confident", "c=auto", "", ""},
		{"org_fallback human: hardco's choice", human, "hardco", questionsBody("", "c", "choice"), `{"c":0.7}`,
			"human", "org_no_threshold", "c=human", "", ""},
		{"org_fallback human: an org without a block", human, "initech", questionsBody("", "a", "noul"), `{"a":1}`,
			"human", "org_no_threshold", "a=human", "", ""},
		{"org_fallback human: acme keeps its own line", human, "acme", questionsBody("", "a", "noul"), `{"a":0.97}`,
			"auto", "confident", "a=auto", "a=" + certAcmeNoul, certAcmeNoul},
		// Only questions auto under a certified line are named, ids
		// percent-encoded, in the request's order (questionsBody sorts
		// them): "low" is under its threshold, "pick" auto under an
		// uncertified line.
		{"certificates per question", pooled, "initech",
			questionsBody("", "low", "noul", "pick", "choice", "strict,q", "noul", "中文", "noul"),
			`{"low":0.6,"pick":0.9,"strict,q":0.99,"中文":0.05}`,
			"human", "low_confidence", "low=human, pick=auto, strict%2Cq=auto, %E4%B8%AD%E6%96%87=auto",
			"strict%2Cq=" + certStrict + ", %E4%B8%AD%E6%96%87=" + certPooledNoul, certStrict + "," + certPooledNoul},
		// The question line applies to every org, even with org_fallback
		// human, and before an org's own line.
		{"question line for an org without a block", human, "initech", questionsBody("", "strict,q", "noul"), `{"strict,q":0.99}`,
			"auto", "confident", "strict%2Cq=auto", "strict%2Cq=" + certStrict, certStrict},
		{"question line before the org's human line", pooled, "hardco", questionsBody("", "strict,q", "noul"), `{"strict,q":0.99}`,
			"auto", "confident", "strict%2Cq=auto", "strict%2Cq=" + certStrict, certStrict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, tc.url, "k", tc.body, "X-Org-Id", tc.org, "X-Simulator-Confidence", tc.confidences)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if r, why := resp.Header.Get("X-Route"), resp.Header.Get("X-Route-Reason"); r != tc.route || why != tc.reason {
				t.Errorf("X-Route %s, X-Route-Reason %s, want %s %s", r, why, tc.route, tc.reason)
			}
			if q := resp.Header.Get("X-Route-Questions"); q != tc.questions {
				t.Errorf("X-Route-Questions %q, want %q", q, tc.questions)
			}
			cert, present := resp.Header["X-Route-Certificate"]
			switch {
			case tc.certificate == "" && present:
				t.Errorf("X-Route-Certificate %q, want none", cert)
			case tc.certificate != "" && (len(cert) != 1 || cert[0] != tc.certificate):
				t.Errorf("X-Route-Certificate %q, want %q", cert, tc.certificate)
			}
			id := resp.Header.Get("X-Request-Id")
			var entry map[string]any
			for _, e := range g.Entries() {
				if e["request_id"] == id {
					entry = e
				}
			}
			if entry == nil {
				t.Fatalf("no log entry for request %s", id)
			}
			if got, ok := entry["route_certificates"].(string); !ok || got != tc.logged || entry["org"] != tc.org || entry["route_reason"] != tc.reason {
				t.Errorf("log: org %v, route_reason %v, route_certificates %v, want %s %s %q",
					entry["org"], entry["route_reason"], entry["route_certificates"], tc.org, tc.reason, tc.logged)
			}
		})
	}
	// The log names certificates, never the questions (their ids are the
	// client's).
	if raw := string(g.RawLog()); strings.Contains(raw, "strict,q") || strings.Contains(raw, "strict%2Cq") {
		t.Error("a question id reached the log")
	}
}
