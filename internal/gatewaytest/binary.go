package gatewaytest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildBinary builds the gateway binary (the package at cmdDir, the path
// to cmd/systemone-gateway from the test's directory) into a fresh
// directory, for a TestMain: it returns the binary's path and the
// directory to remove when the tests are done.
func BuildBinary(cmdDir string) (bin, dir string, err error) {
	dir, err = os.MkdirTemp("", "systemone-gateway-bin")
	if err != nil {
		return "", "", err
	}
	bin = filepath.Join(dir, "systemone-gateway")
	if out, err := exec.Command("go", "build", "-o", bin, cmdDir).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("go build %s: %v\n%s", cmdDir, err, out)
	}
	return bin, dir, nil
}
