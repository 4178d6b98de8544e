package route

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

// certificatesFile writes certs, sealed, to a file and returns its path
// and the certificates with their ids.
func certificatesFile(t *testing.T, certs ...certificate.Certificate) (string, []certificate.Certificate) {
	t.Helper()
	for i := range certs {
		certs[i] = certs[i].Seal()
	}
	path := filepath.Join(t.TempDir(), "certificates.jsonl")
	if err := certificate.WriteFile(path, certs); err != nil {
		t.Fatal(err)
	}
	return path, certs
}

// With a certificates file, every cert id of the pins must be a
// certificate of the line's group and threshold; the threshold matches
// exactly or as calibrate writes it (rounded up to 4 decimals).
func TestCertificatesFile(t *testing.T) {
	path, c := certificatesFile(t,
		certificate.Certificate{Model: "v", Type: "noul", Threshold: 0.91234, Method: "anytime"},
		certificate.Certificate{Model: "v", Type: "choice", Question: "q", Threshold: 0.8, Method: "anytime"},
		certificate.Certificate{Model: "v", Type: "score", Org: "acme", Threshold: 0.7, Method: "anytime"},
		certificate.Certificate{Model: "w", Type: "noul", Threshold: 0.5, Method: "anytime"},
	)
	noul, question, acme, other := c[0].ID, c[1].ID, c[2].ID, c[3].ID
	cfg := func(p Pin) Config { p.Version = "v"; return Config{Pins: []Pin{p}, Certificates: path} }
	good := cfg(Pin{
		Noul: ptr(0.9124), NoulCert: noul,
		Questions: map[string]float64{"q": 0.8}, QuestionCerts: map[string]string{"q": question},
		Orgs: []OrgPin{{Org: "acme", Lines: []OrgLine{{Type: "score", Threshold: ptr(0.7), Cert: acme}}}},
	})
	if err := good.Validate(); err != nil {
		t.Errorf("lines that match their certificates: %v", err)
	}
	if mismatches, checked := good.CertificateMismatches(c); len(mismatches) != 0 || checked != 3 {
		t.Errorf("CertificateMismatches: %v, %d checked; want none of 3", mismatches, checked)
	}
	if err := cfg(Pin{Noul: ptr(0.91234), NoulCert: noul}).Validate(); err != nil {
		t.Errorf("the exact threshold: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tt := range map[string]struct {
		cfg  Config
		want string
	}{
		"unknown id":             {cfg(Pin{Noul: ptr(0.9), NoulCert: "0123456789abcdef"}), `pin "v": noul 0.9 cert 0123456789abcdef: the certificates file has no certificate 0123456789abcdef`},
		"rounded down":           {cfg(Pin{Noul: ptr(0.9123), NoulCert: noul}), `pin "v": noul 0.9123 cert ` + noul + `: certificate ` + noul + ` is for threshold 0.91234 (written 0.9124, rounded up to 4 decimals)`},
		"another type":           {cfg(Pin{Choice: ptr(0.9124), ChoiceCert: noul}), `pin "v": choice 0.9124 cert ` + noul + `: certificate ` + noul + ` is for pin "v" noul`},
		"another model":          {cfg(Pin{Noul: ptr(0.5), NoulCert: other}), `pin "v": noul 0.5 cert ` + other + `: certificate ` + other + ` is for pin "w" noul`},
		"an org's on the type":   {cfg(Pin{Score: ptr(0.7), ScoreCert: acme}), `pin "v": score 0.7 cert ` + acme + `: certificate ` + acme + ` is for pin "v" org "acme" score`},
		"a question's on a type": {cfg(Pin{Choice: ptr(0.8), ChoiceCert: question}), `pin "v": choice 0.8 cert ` + question + `: certificate ` + question + ` is for pin "v" question "q" (choice)`},
		"another question": {cfg(Pin{Questions: map[string]float64{"r": 0.8}, QuestionCerts: map[string]string{"r": question}}),
			`pin "v": question "r" 0.8 cert ` + question + `: certificate ` + question + ` is for pin "v" question "q" (choice)`},
		"another org": {cfg(Pin{Orgs: []OrgPin{{Org: "globex", Lines: []OrgLine{{Type: "score", Threshold: ptr(0.7), Cert: acme}}}}}),
			`pin "v": org "globex": score 0.7 cert ` + acme + `: certificate ` + acme + ` is for pin "v" org "acme" score`},
		"empty file":   {Config{Certificates: empty}, "certificates: " + empty + " holds no certificate (calibrate --certificates writes one line per threshold)"},
		"a device":     {Config{Certificates: "/dev/zero"}, "certificates: /dev/zero is not a regular file (a character device)"},
		"missing file": {Config{Certificates: "/nonexistent/certificates.jsonl"}, "certificates: open /nonexistent/certificates.jsonl: no such file or directory"},
	} {
		if err := tt.cfg.Validate(); err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v\nwant %s", name, err, tt.want)
		}
	}
	// Placeholders are checked once the router resolves them.
	t.Setenv("SYSTEMONE_TEST_VERSION", "w")
	late := Config{Pins: []Pin{{Version: "{env.SYSTEMONE_TEST_VERSION}", Noul: ptr(0.9), NoulCert: noul}}, Certificates: path}
	if err := late.Validate(); err != nil {
		t.Errorf("a version with a placeholder, as written: %v", err)
	}
	if _, err := New(late, nil, "", nil); err == nil || !strings.Contains(err.Error(), `is for pin "v" noul`) {
		t.Errorf("the router, the version resolved to w: %v", err)
	}
}
