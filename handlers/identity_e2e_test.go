package handlers_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
)

// With org_header, org_keys and unknown_keys reject, the header names the
// org of a known key only: an unknown key is refused with 401 whatever
// org the header claims, and never reaches the upstream.
func TestRejectHoldsWithOrgHeader(t *testing.T) {
	up := unlimitedSimulator(t)
	sum := sha256.Sum256([]byte("k1"))
	keys := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(keys, []byte(fmt.Sprintf(`{%q:"acme"}`, hex.EncodeToString(sum[:]))), 0o600); err != nil {
		t.Fatal(err)
	}
	sites, url := site(t, up.Addr(), "\t\torg_header X-Org\n\t\torg_keys "+keys+"\n\t\tunknown_keys reject\n")
	g := gatewaytest.Load(t, sites)

	resp, body := post(t, url, "stranger", smallBody, "X-Org", "acme")
	if resp.StatusCode != 401 || resp.Header.Get("X-Gateway-Reject") != "invalid_api_key" {
		t.Errorf("an unknown key with X-Org: acme: %d %q %s, want 401 invalid_api_key", resp.StatusCode, resp.Header.Get("X-Gateway-Reject"), body)
	}
	if n := up.Calls(); n != 0 {
		t.Errorf("the unknown key reached the upstream (%d calls)", n)
	}
	if resp, body := post(t, url, "k1", smallBody, "X-Org", "tenant-7"); resp.StatusCode != 200 {
		t.Fatalf("a known key with X-Org: %d %s", resp.StatusCode, body)
	}
	var orgs []any
	for _, e := range g.Entries() {
		orgs = append(orgs, e["org"])
	}
	if len(orgs) != 2 || orgs[1] != "tenant-7" || orgs[0] == "acme" {
		t.Errorf("logged orgs %v, want the refused request under no org acme, then tenant-7 from the header", orgs)
	}
}
