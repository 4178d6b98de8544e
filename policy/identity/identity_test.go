package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func keysFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func digest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func TestOrg(t *testing.T) {
	file := keysFile(t, `{"`+digest("k1")+`":"acme","`+strings.ToUpper(digest("k2"))+`":"acme","`+digest("k3")+`":"globex"}`)
	req, _ := http.NewRequest("POST", "/v1/systemone", nil)
	req.Header.Set("X-Org", "spoofed")

	own, err := New("", file, "")
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"k1": "acme", "k2": "acme", "k3": "globex"} {
		if org, ok := own.Org(req, key); !ok || org != want {
			t.Errorf("key %s: %q %v, want %q", key, org, ok, want)
		}
	}
	if orgs := own.Orgs(); !slices.Equal(orgs, []string{"acme", "globex"}) {
		t.Errorf("Orgs() = %q, want acme and globex once each", orgs)
	}
	org, ok := own.Org(req, "secret-unknown")
	if !ok || !strings.HasPrefix(org, "key-") || len(org) != 20 || strings.Contains(org, "secret") {
		t.Errorf("unknown key: %q %v, want a fingerprint", org, ok)
	}
	if again, _ := own.Org(req, "secret-unknown"); again != org {
		t.Errorf("fingerprint not stable: %q vs %q", again, org)
	}

	reject, err := New("", file, UnknownReject)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := reject.Org(req, "secret-unknown"); ok {
		t.Error("unknown key admitted with unknown_keys reject")
	}
	if org, ok := reject.Org(req, "k1"); !ok || org != "acme" {
		t.Errorf("known key with reject: %q %v", org, ok)
	}

	header, _ := New("X-Org", "", "")
	if org, _ := header.Org(req, "k1"); org != "spoofed" {
		t.Errorf("org_header: %q", org)
	}
	req.Header.Del("X-Org")
	if org, _ := header.Org(req, "k1"); !strings.HasPrefix(org, "key-") {
		t.Errorf("org_header absent: %q, want the key's fingerprint", org)
	}
}

// Identify names the identity mode that knew the org, and carries the key
// only as its SHA-256.
func TestIdentifyNamesTheMode(t *testing.T) {
	file := keysFile(t, `{"`+digest("k1")+`":"acme"}`)
	r, err := New("X-Org", file, "")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", "/v1/systemone", nil)
	for _, tc := range []struct {
		header, key, org string
		source           Source
	}{
		{"acme", "k1", "acme", SourceHeader},
		{"", "k1", "acme", SourceKeys},
		{"", "k9", Fingerprint(sha256.Sum256([]byte("k9"))), SourceKey},
	} {
		req.Header.Set("X-Org", tc.header)
		c, ok := r.Identify(req, tc.key)
		if !ok || c.Org != tc.org || c.Source != tc.source || c.KeySum != sha256.Sum256([]byte(tc.key)) {
			t.Errorf("header %q key %s: %+v %v, want %s by %s", tc.header, tc.key, c, ok, tc.org, tc.source)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for name, c := range map[string]struct{ file, unknown string }{
		"reject without keys": {"", UnknownReject},
		"bad unknown":         {"", "maybe"},
		"missing file":        {"/nonexistent/keys.json", ""},
		"not hex":             {keysFile(t, `{"sk-live-123":"acme"}`), ""},
		"empty org":           {keysFile(t, `{"`+digest("k")+`":""}`), ""},
		"not json":            {keysFile(t, `nope`), ""},
	} {
		_, err := New("", c.file, c.unknown)
		if err == nil {
			t.Errorf("%s: no error", name)
		} else if strings.Contains(err.Error(), "sk-live") {
			t.Errorf("%s: error echoes a key: %v", name, err)
		}
	}
}

func TestBearerKey(t *testing.T) {
	for v, want := range map[string]string{"Bearer abc": "abc", "bearer  abc ": "abc", "Basic abc": "", "Bearer ": "", "": "", "Bearerabc": ""} {
		h := http.Header{}
		if v != "" {
			h.Set("Authorization", v)
		}
		got, ok := BearerKey(h)
		if got != want || ok != (want != "") {
			t.Errorf("%q: %q %v, want %q", v, got, ok, want)
		}
	}
}

// The identity options' rule and placeholders live here: Validate as
// written, New once resolved.
func TestValidateAndPlaceholders(t *testing.T) {
	for _, c := range []struct{ file, unknown, err string }{
		{"", "", ""},
		{"", UnknownOwn, ""},
		{"keys.json", UnknownReject, ""},
		{"", UnknownReject, "unknown_keys reject needs org_keys"},
		{"", "maybe", `unknown_keys must be own or reject, not "maybe"`},
	} {
		err := Validate("", c.file, c.unknown)
		if c.err == "" && err != nil || c.err != "" && (err == nil || err.Error() != c.err) {
			t.Errorf("Validate(%q, %q) = %v, want %q", c.file, c.unknown, err, c.err)
		}
	}
	file := keysFile(t, `{"`+digest("k")+`":"acme"}`)
	t.Setenv("SYSTEMONE_TEST_KEYS", file)
	t.Setenv("SYSTEMONE_TEST_HEADER", "X-Org")
	r, err := New("{env.SYSTEMONE_TEST_HEADER}", "{env.SYSTEMONE_TEST_KEYS}", UnknownReject)
	if err != nil {
		t.Fatal(err)
	}
	if orgs := r.Orgs(); len(orgs) != 1 || orgs[0] != "acme" {
		t.Errorf("keys from {env.SYSTEMONE_TEST_KEYS}: orgs %v", orgs)
	}
	if r.header != "X-Org" {
		t.Errorf("header from {env.SYSTEMONE_TEST_HEADER}: %q", r.header)
	}
	if _, err := New("", "{env.SYSTEMONE_TEST_UNSET_NAME}", UnknownReject); err == nil || !strings.Contains(err.Error(), "empty once its placeholders are resolved") {
		t.Errorf("reject with a keys file that resolves to nothing: %v", err)
	}
}

// An org_header is a header name, and not one whose value is a credential:
// the org id is written into logs, Redis keys and queue entries.
func TestOrgHeaderRefusals(t *testing.T) {
	for header, want := range map[string]string{
		"Authorization":       "org_header Authorization carries credentials",
		"authorization":       "org_header Authorization carries credentials",
		"Proxy-Authorization": "org_header Proxy-Authorization carries credentials",
		"cookie":              "org_header Cookie carries credentials",
		"Set-Cookie":          "org_header Set-Cookie carries credentials",
		"X Org":               `org_header "X Org" is not a valid header name`,
		"X-Org:":              `org_header "X-Org:" is not a valid header name`,
		"X-Örg":               `org_header "X-Örg" is not a valid header name`,
	} {
		if err := Validate(header, "", ""); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%q) = %v, want %q", header, err, want)
		}
		if _, err := New(header, "", ""); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New(%q) = %v, want %q", header, err, want)
		}
	}
	for _, ok := range []string{"X-Org", "x_org", "{env.SYSTEMONE_TEST_ORG_HEADER}"} {
		if err := Validate(ok, "", ""); err != nil {
			t.Errorf("Validate(%q) = %v", ok, err)
		}
	}
	// A placeholder is checked once resolved.
	t.Setenv("SYSTEMONE_TEST_ORG_HEADER", "Authorization")
	if _, err := New("{env.SYSTEMONE_TEST_ORG_HEADER}", "", ""); err == nil || !strings.Contains(err.Error(), "carries credentials") {
		t.Errorf("org_header resolving to Authorization: %v", err)
	}
}

// unknown_keys reject refuses a key missing from org_keys even when the
// org_header names an org; a known key still takes the header's org.
func TestRejectWithOrgHeader(t *testing.T) {
	r, err := New("X-Org", keysFile(t, `{"`+digest("k1")+`":"acme"}`), UnknownReject)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", "/v1/systemone", nil)
	req.Header.Set("X-Org", "acme")
	if c, ok := r.Identify(req, "unknown-key"); ok {
		t.Errorf("an unknown key with X-Org: acme admitted as %+v", c)
	}
	if c, ok := r.Identify(req, "k1"); !ok || c.Org != "acme" || c.Source != SourceHeader {
		t.Errorf("a known key with X-Org: %+v %v", c, ok)
	}
}

// org_keys is read bounded: a device is refused at once, not read forever,
// and so is a file over MaxKeysFile.
func TestKeysFileBounded(t *testing.T) {
	if _, err := New("", "/dev/zero", ""); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("org_keys /dev/zero: %v", err)
	}
	big := filepath.Join(t.TempDir(), "big.json")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxKeysFile + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := New("", big, ""); err == nil || !strings.Contains(err.Error(), "larger than 16 MiB") {
		t.Errorf("org_keys over 16 MiB: %v", err)
	}
}
