package calibrate

import (
	"errors"
	"fmt"
	"io"

	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

// ConfigCheck compares the cert ids of the Caddyfile at path with certs:
// an error per threshold line that does not match, and the number of
// lines compared. The binary gives `verify --config` the gateway's own
// (caddyfile.CertificateMismatches): the review loop reads no policy's
// config itself.
type ConfigCheck func(path string, certs []certificate.Certificate) (mismatches []error, checked int, err error)

// verifyConfig compares the cert ids of every systemone route block of the
// Caddyfile at path with certs through check, printing a line per mismatch
// and one in total. It returns the number of mismatches; a Caddyfile with
// no cert id to compare is an error.
func verifyConfig(out io.Writer, check ConfigCheck, path string, certs []certificate.Certificate, certsPath string) (int, error) {
	if check == nil {
		return 0, errors.New("--config is not available in this build")
	}
	found, checked, err := check(path, certs)
	if err != nil {
		return 0, err
	}
	mismatches := 0
	for _, m := range found {
		mismatches++
		if _, err := fmt.Fprintf(out, "mismatch %s: %v\n", path, m); err != nil {
			return 0, err
		}
	}
	if checked == 0 {
		return 0, fmt.Errorf("%s has no cert <id> on a threshold line to compare with %s", path, certsPath)
	}
	if mismatches == 0 {
		_, err = fmt.Fprintf(out, "ok %s: every cert id (%d) is a certificate in %s of its line's group and threshold\n", path, checked, certsPath)
	}
	return mismatches, err
}
