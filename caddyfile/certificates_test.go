package caddyfile_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

// `certificates <file>` in the route block: each cert id must be a
// certificate of its line's group and threshold. A Caddyfile gets the
// route policy's words at the line of the pin at fault (the file's own
// faults at the certificates line), a JSON config the same words.
func TestRouteCertificates(t *testing.T) {
	dir := t.TempDir()
	certs := []certificate.Certificate{
		certificate.Certificate{Model: "v", Type: "noul", Threshold: 0.91234, Method: "anytime"}.Seal(),
		certificate.Certificate{Model: "v", Type: "choice", Org: "acme", Threshold: 0.8, Method: "anytime"}.Seal(),
	}
	path, empty := filepath.Join(dir, "certificates.jsonl"), filepath.Join(dir, "empty.jsonl")
	if err := certificate.WriteFile(path, certs); err != nil {
		t.Fatal(err)
	}
	if err := certificate.WriteFile(empty, nil); err != nil {
		t.Fatal(err)
	}
	noul, acme := certs[0].ID, certs[1].ID

	good := fmt.Sprintf("certificates %s\npin v {\nnoul 0.9124 cert %s\norg acme {\nchoice 0.8 cert %s\n}\n}", path, noul, acme)
	if err := adaptAndProvision(routeSite(good)); err != nil {
		t.Errorf("ids that match their certificates: %v", err)
	}
	if got := adaptedRoute(t, routeSite(good)); got.Certificates != path {
		t.Errorf("adapted certificates %q, want %q", got.Certificates, path)
	}

	for _, tt := range []struct {
		name, caddyfile, json, want string
		line                        int
	}{
		{"threshold rounded down",
			fmt.Sprintf("pin w {\nnoul 0.5\n}\npin v {\nnoul 0.9123 cert %s\n}\ncertificates %s", noul, path),
			fmt.Sprintf(`{"certificates": %q, "pins": [{"version": "w", "noul": 0.5}, {"version": "v", "noul": 0.9123, "noul_cert": %q}]}`, path, noul),
			fmt.Sprintf(`pin "v": noul 0.9123 cert %s: certificate %s is for threshold 0.91234 (written 0.9124, rounded up to 4 decimals)`, noul, noul),
			7},
		{"another org's certificate",
			fmt.Sprintf("certificates %s\npin v {\norg globex {\nchoice 0.8 cert %s\n}\n}", path, acme),
			fmt.Sprintf(`{"certificates": %q, "pins": [{"version": "v", "orgs": [{"org": "globex", "lines": [{"type": "choice", "threshold": 0.8, "cert": %q}]}]}]}`, path, acme),
			fmt.Sprintf(`pin "v": org "globex": choice 0.8 cert %s: certificate %s is for pin "v" org "acme" choice`, acme, acme),
			5},
		{"an id not in the file",
			fmt.Sprintf("certificates %s\npin v {\nscore 0.7 cert 0123456789abcdef\n}", path),
			fmt.Sprintf(`{"certificates": %q, "pins": [{"version": "v", "score": 0.7, "score_cert": "0123456789abcdef"}]}`, path),
			`pin "v": score 0.7 cert 0123456789abcdef: the certificates file has no certificate 0123456789abcdef`,
			5},
		{"an empty file",
			fmt.Sprintf("pin v {\nnoul 0.9124 cert %s\n}\ncertificates %s", noul, empty),
			fmt.Sprintf(`{"certificates": %q, "pins": [{"version": "v", "noul": 0.9124, "noul_cert": %q}]}`, empty, noul),
			"certificates: " + empty + " holds no certificate (calibrate --certificates writes one line per threshold)",
			7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := adaptAndProvision(routeSite(tt.caddyfile))
			if want := fmt.Sprintf("route: %s, at Caddyfile:%d", tt.want, tt.line); err == nil || !strings.HasSuffix(err.Error(), want) {
				t.Errorf("Caddyfile: %v\nwant ...%s", err, want)
			}
			err = caddy.Validate(routeJSON(tt.json))
			if err == nil || !strings.HasSuffix(err.Error(), ": "+tt.want) {
				t.Errorf("JSON: %v\nwant ...: %s", err, tt.want)
			}
		})
	}
}
