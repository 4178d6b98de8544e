package route

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

// certifiedLine is a threshold line with a certificate id, and the group
// its certificate must be of. from is the first version of an escalate
// block's line ("" for a pin's): its version is then the second.
type certifiedLine struct {
	version, typ, question, org, from string
	threshold                         float64
	cert                              string
}

// String writes the line as the Caddyfile does, after its pin or escalate
// block.
func (l certifiedLine) String() string {
	t := strconv.FormatFloat(l.threshold, 'f', -1, 64)
	block := fmt.Sprintf("pin %q", l.version)
	if l.from != "" {
		block = fmt.Sprintf("escalate %q to %q", l.from, l.version)
	}
	switch {
	case l.question != "":
		return fmt.Sprintf("%s: question %q %s cert %s", block, l.question, t, l.cert)
	case l.org != "":
		return fmt.Sprintf("%s: org %q: %s %s cert %s", block, l.org, l.typ, t, l.cert)
	}
	return fmt.Sprintf("%s: %s %s cert %s", block, l.typ, t, l.cert)
}

// certifiedLines lists p's lines with a certificate id: the type lines,
// the question lines by id, then the org lines in the order written.
func (p Pin) certifiedLines() []certifiedLine {
	var out []certifiedLine
	for _, t := range p.typeThresholds() {
		if t.cert != "" && t.v != nil {
			out = append(out, certifiedLine{version: p.Version, typ: t.typ, threshold: *t.v, cert: t.cert})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(p.QuestionCerts)) {
		if t, ok := p.Questions[id]; ok {
			out = append(out, certifiedLine{version: p.Version, question: id, threshold: t, cert: p.QuestionCerts[id]})
		}
	}
	for _, o := range p.Orgs {
		for _, l := range o.Lines {
			if l.Cert != "" && l.Threshold != nil {
				out = append(out, certifiedLine{version: p.Version, typ: l.Type, org: o.Org, threshold: *l.Threshold, cert: l.Cert})
			}
		}
	}
	return out
}

// check reports how the line disagrees with certs, or nil. A question
// line says no type, so its certificate's type is not compared.
func (l certifiedLine) check(certs map[string]certificate.Certificate) error {
	c, ok := certs[l.cert]
	if !ok {
		return fmt.Errorf("%s: the certificates file has no certificate %s", l, l.cert)
	}
	if c.Model != l.version || c.EscalatedFrom != l.from || c.Question != l.question || c.Org != l.org || (l.question == "" && c.Type != l.typ) {
		return fmt.Errorf("%s: certificate %s is for %s", l, l.cert, group(c))
	}
	if !c.Matches(l.threshold) {
		return fmt.Errorf("%s: certificate %s is for threshold %v (written %s, rounded up to 4 decimals)",
			l, l.cert, c.Threshold, certificate.FormatThreshold(c.Threshold))
	}
	return nil
}

// group names a certificate's group as a pin's or an escalate block's
// lines do.
func group(c certificate.Certificate) string {
	s := []string{fmt.Sprintf("pin %q", c.Model)}
	if c.EscalatedFrom != "" {
		s[0] = fmt.Sprintf("escalate %q to %q", c.EscalatedFrom, c.Model)
	}
	if c.Org != "" {
		s = append(s, fmt.Sprintf("org %q", c.Org))
	}
	if c.Question != "" {
		s = append(s, fmt.Sprintf("question %q (%s)", c.Question, c.Type))
	} else {
		s = append(s, c.Type)
	}
	return strings.Join(s, " ")
}

// CertificateMismatches lists, a line each, the threshold lines of c whose
// certificate id certs do not back: an id the file does not hold, or a
// certificate of another group (model, type, question or org) or another
// threshold. A threshold matches its certificate's exactly or as
// calibrate writes it, rounded up to 4 decimals. Lines whose names still
// hold placeholders are left out (the router checks them resolved). None
// when every id is backed; `verify --config` prints them all, Validate
// returns the first.
func (c Config) CertificateMismatches(certs []certificate.Certificate) (mismatches []error, checked int) {
	byID := make(map[string]certificate.Certificate, len(certs))
	for _, cert := range certs {
		byID[cert.ID] = cert
	}
	for _, l := range c.certifiedLines() {
		if strings.Contains(l.version+l.question+l.org+l.from, "{") {
			continue
		}
		checked++
		if err := l.check(byID); err != nil {
			mismatches = append(mismatches, err)
		}
	}
	return mismatches, checked
}

// certifiedLines lists the lines with a certificate id of c's pins, then
// of its escalate blocks.
func (c Config) certifiedLines() []certifiedLine {
	var out []certifiedLine
	for _, p := range c.Pins {
		out = append(out, p.certifiedLines()...)
	}
	for _, e := range c.Escalations {
		for _, l := range e.To.certifiedLines() {
			l.from = e.From
			out = append(out, l)
		}
	}
	return out
}

// checkCertificates reads the Certificates file and checks c's lines
// against it; nothing without one, or while its name holds placeholders.
func (c Config) checkCertificates() error {
	if c.Certificates == "" || strings.Contains(c.Certificates, "{") {
		return nil
	}
	certs, err := certificate.ReadFile(c.Certificates)
	if err != nil {
		return fmt.Errorf("certificates: %v", err)
	}
	if mismatches, _ := c.CertificateMismatches(certs); len(mismatches) > 0 {
		return mismatches[0]
	}
	return nil
}
