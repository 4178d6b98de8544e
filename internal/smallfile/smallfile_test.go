package smallfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := Read(small, 10); err != nil || string(data) != "0123456789" {
		t.Errorf("a file of exactly max bytes: %q %v", data, err)
	}
	if _, err := Read(small, 9); err == nil || !strings.Contains(err.Error(), "is larger than") {
		t.Errorf("a file over max: %v", err)
	}
	for path, want := range map[string]string{
		"/dev/zero":                   "not a regular file (a character device)",
		dir:                           "not a regular file (a directory)",
		filepath.Join(dir, "missing"): "no such file",
	} {
		if _, err := Read(path, MaxSize); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Read(%s) = %v, want an error saying %q", path, err, want)
		}
	}
}
