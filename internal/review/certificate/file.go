package certificate

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/systemone/systemone-gateway/internal/smallfile"
)

// FormatThreshold writes a threshold with at most 4 decimals, rounded up,
// so that the written value is never below t: raising a threshold only
// moves answers to a human. (The guarantee is for the answers at or above
// t; those at or above the written value are their most confident part,
// and keep it when agreement does not fall as confidence rises.) It rounds the
// shortest decimal that reads back as t, not t's binary expansion: 0.95
// is written 0.95, not 0.9501, though the float64 nearest 0.95 is a hair
// above it.
func FormatThreshold(t float64) string {
	s := strconv.FormatFloat(t, 'f', -1, 64)
	whole, frac, _ := strings.Cut(s, ".")
	if len(frac) <= 4 {
		return s
	}
	// The shortest form has no trailing zero, so a digit past the fourth is
	// nonzero: round up. t is in 0..1, so the digits fit an int.
	n, err := strconv.Atoi(whole + frac[:4])
	if err != nil {
		return s // not a threshold from a Line; left exact rather than wrong
	}
	n++
	out := fmt.Sprintf("%d.%04d", n/10000, n%10000)
	return strings.TrimSuffix(strings.TrimRight(out, "0"), ".")
}

// Written is t as a Caddyfile line holds it: FormatThreshold read back.
func Written(t float64) float64 {
	w, err := strconv.ParseFloat(FormatThreshold(t), 64)
	if err != nil {
		return t
	}
	return w
}

// Matches reports whether threshold, a threshold in a route config, is
// the certificate's: its exact value (a JSON config may hold it unrounded)
// or the value calibrate's fragment writes for it.
func (c Certificate) Matches(threshold float64) bool {
	return threshold == c.Threshold || threshold == Written(c.Threshold)
}

// ReadFile reads the certificates file at path (Read's format): a regular
// file of at most smallfile.MaxSize (16 MiB) holding at least one
// certificate. An empty file is an error: whatever checks against it would
// find nothing to check.
func ReadFile(path string) ([]Certificate, error) {
	data, err := smallfile.Read(path, smallfile.MaxSize)
	if err != nil {
		return nil, err
	}
	certs, err := Read(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%s holds no certificate (calibrate --certificates writes one line per threshold)", path)
	}
	return certs, nil
}

// WriteFile writes certs to the file at path (Write's format), replacing
// it.
func WriteFile(path string, certs []Certificate) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Write(f, certs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
