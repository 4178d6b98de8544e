package route

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/systemone/systemone-gateway/internal/headerset"
)

// Headers the gateway owns on a routed response.
const (
	HeaderRoute      = "X-Route"
	HeaderReason     = "X-Route-Reason"
	HeaderModel      = "X-Route-Model"
	HeaderConfidence = "X-Route-Confidence"
	HeaderQuestions  = "X-Route-Questions"
	// HeaderCertificate names, for each question routed auto under a
	// threshold line that carries a certificate, that certificate's id.
	HeaderCertificate = "X-Route-Certificate"
)

// SetHeaders writes the decision's X-Route* headers to h, the headers of a
// 200 response. It first deletes any the upstream sent under these names, so
// that none passes as the gateway's. X-Route-Model and X-Route-Confidence
// are left out when unknown (X-Route-Model also when the version holds bytes
// a header value cannot carry), X-Route-Questions when there are no
// questions, X-Route-Certificate when no question routed auto under a line
// with a certificate.
func (d Decision) SetHeaders(h http.Header) {
	var s headerset.Set
	d.AddHeaders(&s)
	s.WriteTo(h)
}

// AddHeaders adds what SetHeaders writes to s, which the handler writes
// with the response's other fields of the gateway at once.
func (d Decision) AddHeaders(s *headerset.Set) {
	s.Add(HeaderRoute, d.Route)
	s.Add(HeaderReason, d.Reason)
	if d.Model != "" && isPrintableASCII(d.Model) {
		s.Add(HeaderModel, d.Model)
	} else {
		s.Del(HeaderModel)
	}
	var buf [256]byte
	if d.HasMinConfidence {
		s.AddBytes(HeaderConfidence, strconv.AppendFloat(buf[:0], d.MinConfidence, 'f', 2, 64))
	} else {
		s.Del(HeaderConfidence)
	}
	if len(d.Questions) > 0 {
		s.AddBytes(HeaderQuestions, d.appendQuestions(buf[:0]))
	} else {
		s.Del(HeaderQuestions)
	}
	if v := d.certificateHeader(); v != "" {
		s.Add(HeaderCertificate, v)
	} else {
		s.Del(HeaderCertificate)
	}
	if v := d.escalatedHeader(); v != "" {
		s.Add(HeaderEscalated, v)
	} else {
		s.Del(HeaderEscalated)
	}
}

// certifies reports whether q's route names a certificate: it routed auto
// under a threshold line that carries one.
func (q QuestionRoute) certifies() bool {
	return q.Route == RouteAuto && q.Certificate != ""
}

// certificateHeader returns `<id>=<certificate id>, ...` for the questions
// that certify, in the request's order, ids percent-encoded as in
// X-Route-Questions; "" when none does. A certificate id is hex digits,
// which need no encoding.
func (d Decision) certificateHeader() string {
	n := 0
	for _, q := range d.Questions {
		if q.certifies() {
			n += len(q.ID) + len(", =") + len(q.Certificate)
		}
	}
	if n == 0 {
		return ""
	}
	b := make([]byte, 0, n)
	for _, q := range d.Questions {
		if !q.certifies() {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = appendEscaped(b, q.ID)
		b = append(b, '=')
		b = append(b, q.Certificate...)
	}
	return string(b)
}

// Certificates returns the ids of the certificates named in
// X-Route-Certificate, each once, in the order first named, joined by
// commas: what the log entry records of them (the question ids, which a
// client chooses, stay out of the log). "" when none. The distinct ids are
// at most the configuration's threshold lines, so the search among them
// stays short however many questions the request has.
func (d Decision) Certificates() string {
	var ids []string
	for _, q := range d.Questions {
		if q.certifies() && !slices.Contains(ids, q.Certificate) {
			ids = append(ids, q.Certificate)
		}
	}
	return strings.Join(ids, ",")
}

// appendQuestions appends X-Route-Questions' value to b: `<id>=<route>,
// ...` with ids percent-encoded.
func (d Decision) appendQuestions(b []byte) []byte {
	n := 0
	for _, q := range d.Questions {
		n += len(q.ID) + len(", =human")
	}
	b = slices.Grow(b, n)
	for i, q := range d.Questions {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendEscaped(b, q.ID)
		b = append(b, '=')
		b = append(b, q.Route...)
	}
	return b
}

// appendEscaped percent-encodes s as RFC 3986 does for data: every byte but
// the unreserved characters A-Z a-z 0-9 - . _ ~ becomes %XX (uppercase hex).
// That escapes the header's own separators (`,` `=` space) and keeps the
// value ASCII whatever the id holds.
func appendEscaped(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b = append(b, c)
		} else {
			b = append(b, '%', hex[c>>4], hex[c&0xF])
		}
	}
	return b
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7E {
			return false
		}
	}
	return true
}
