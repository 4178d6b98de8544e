package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// The docs and examples use one reviewer's login and one operator's (the
// operator's alone may DELETE /guarantee), so that a reader who follows
// one page into another never meets a third.
var logins = map[string]string{"ann": "secret", "ops": "reset-secret"}

var (
	// curl -u user:password, a URL's user:password@, a basic_auth line
	// `user <bcrypt hash>`, and hash-password --plaintext.
	curlUser  = regexp.MustCompile("-u ([A-Za-z0-9_-]+):([^\\s`'\"]+)")
	urlUser   = regexp.MustCompile(`://([A-Za-z0-9_-]+):([^@/\s'"]+)@`)
	hashLine  = regexp.MustCompile(`(?m)^\s*([A-Za-z0-9_-]+)\s+(\$2[aby]\$\d\d\$[./A-Za-z0-9]{53})\s*$`)
	plaintext = regexp.MustCompile("--plaintext '?([^'\\s`]+)")
)

// loginSources are the files a reader copies logins from: README.md, the
// docs and everything under deploy/examples.
func loginSources(t *testing.T) []string {
	files := []string{"../README.md"}
	md, _ := filepath.Glob("*.md")
	files = append(files, md...)
	err := filepath.WalkDir("../deploy/examples", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestOneReviewerAndOneOperatorLogin(t *testing.T) {
	checked := map[string]bool{}
	seen := map[string]bool{}
	for _, path := range loginSources(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		for _, re := range []*regexp.Regexp{curlUser, urlUser} {
			for _, m := range re.FindAllStringSubmatch(text, -1) {
				if strings.HasPrefix(m[2], "$") || strings.HasPrefix(m[2], "{") {
					continue // a variable, not a login
				}
				if logins[m[1]] != m[2] {
					t.Errorf("%s: login %s:%s, want one of ann:secret (reviewer) and ops:reset-secret (operator)", path, m[1], m[2])
				}
				seen[m[1]] = true
			}
		}
		for _, m := range plaintext.FindAllStringSubmatch(text, -1) {
			if m[1] != logins["ann"] && m[1] != logins["ops"] {
				t.Errorf("%s: hash-password --plaintext %s, want secret or reset-secret", path, m[1])
			}
		}
		for _, m := range hashLine.FindAllStringSubmatch(text, -1) {
			password, ok := logins[m[1]]
			if !ok {
				t.Errorf("%s: basic_auth user %s, want ann or ops", path, m[1])
				continue
			}
			if key := m[1] + " " + m[2]; !checked[key] {
				checked[key] = true
				if bcrypt.CompareHashAndPassword([]byte(m[2]), []byte(password)) != nil {
					t.Errorf("%s: %s's hash is not of the password %q", path, m[1], password)
				}
			}
		}
	}
	if !seen["ann"] || !seen["ops"] {
		t.Errorf("logins used: %v; the check reads no example", seen)
	}
}
