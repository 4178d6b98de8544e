package route

import (
	"fmt"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

// MessageStageMismatch is the warning logged when the config loads with
// an escalate line whose certificate was computed under another threshold
// of the first version than its pin holds.
const MessageStageMismatch = "escalate line certified under another first-version threshold"

// StageMismatches lists, a line each, the escalate lines of c whose
// certificate (in certs, and of the line's group and threshold: what
// CertificateMismatches checks) was computed under another threshold of
// the first version than the first version's pin holds now: the second
// version's threshold was calibrated on the questions escalated under that
// one, so under another its promise is about other questions. The pin's
// threshold for the line is its question line for a question line's id,
// else its type line; it matches when it is the certificate's
// under_threshold exactly or as calibrate writes it (rounded up to 4
// decimals), or when both have none. A pin line carrying a certificate
// other than the one the second stage's certificate names (under_cert) is
// a mismatch too. `verify --config` prints them; the router logs them as
// warnings when it loads.
func (c Config) StageMismatches(certs []certificate.Certificate) []error {
	byID := make(map[string]certificate.Certificate, len(certs))
	for _, cert := range certs {
		byID[cert.ID] = cert
	}
	pins := make(map[string]Pin, len(c.Pins))
	for _, p := range c.Pins {
		pins[p.Version] = p
	}
	var out []error
	for _, l := range c.certifiedLines() {
		cert, ok := byID[l.cert]
		if l.from == "" || !ok || strings.Contains(l.version+l.question+l.from, "{") || l.check(byID) != nil {
			continue // a pin's line, or a mismatch CertificateMismatches reports
		}
		now, nowCert := pins[l.from].firstStage(cert.Type, l.question)
		switch {
		case !sameUnder(cert.UnderThreshold, now):
			out = append(out, fmt.Errorf("%s: certificate %s was computed under %s, and the pin's is now %s: its threshold is about the questions escalated under the first, not those escalated now; calibrate the block again, or put the pin's threshold back",
				l, l.cert, underName(l.from, cert.Type, l.question, cert.UnderThreshold), thresholdName(now)))
		case cert.UnderCert != "" && nowCert != "" && cert.UnderCert != nowCert:
			out = append(out, fmt.Errorf("%s: certificate %s was computed under the threshold of certificate %s, and the pin's line carries certificate %s",
				l, l.cert, cert.UnderCert, nowCert))
		}
	}
	return out
}

// firstStage is the pin's threshold for the first answer of a question
// of type typ, or of id question when the escalate line is a question's:
// the pin's question line for it, else its type line; and the line's
// certificate id. nil when the pin has none (the question routes human,
// and is escalated whatever its first answer).
func (p Pin) firstStage(typ, question string) (*float64, string) {
	if t, ok := p.Questions[question]; ok && question != "" {
		return &t, p.QuestionCerts[question]
	}
	for _, t := range p.typeThresholds() {
		if t.typ == typ {
			return t.v, t.cert
		}
	}
	return nil, ""
}

// sameUnder reports whether the pin's threshold now is the one a
// certificate was computed under: both none, or the same value, exactly or
// as calibrate writes it.
func sameUnder(under, now *float64) bool {
	if under == nil || now == nil {
		return under == nil && now == nil
	}
	return *now == *under || certificate.Written(*now) == *under
}

// underName names the first-stage threshold a certificate was computed
// under, as a pin's line would.
func underName(from, typ, question string, t *float64) string {
	what := typ
	if question != "" {
		what = fmt.Sprintf("question %q (or %s)", question, typ)
	}
	return fmt.Sprintf("pin %q's %s threshold %s", from, what, thresholdName(t))
}

func thresholdName(t *float64) string {
	if t == nil {
		return "none (every question escalated)"
	}
	return strconv.FormatFloat(*t, 'f', -1, 64)
}

// warnStageMismatches logs, at warn level, each of c's StageMismatches
// against its certificates file; nothing without one, or while its name
// holds placeholders (Validate has read it by then).
func (c Config) warnStageMismatches(logger *zap.Logger) {
	if c.Certificates == "" || strings.Contains(c.Certificates, "{") || len(c.Escalations) == 0 {
		return
	}
	certs, err := certificate.ReadFile(c.Certificates)
	if err != nil {
		return // Validate refused the file already; a file changed since is read again at the next load
	}
	for _, m := range c.StageMismatches(certs) {
		logger.Warn(MessageStageMismatch, zap.String("certificates", c.Certificates), zap.String("mismatch", m.Error()))
	}
}
