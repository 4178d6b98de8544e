package handlers

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"net/http"
	"strings"
)

// errUndecodable is a body in a content coding the gateway cannot read.
var errUndecodable = errors.New("body in an unreadable content coding")

// decodeBody returns a body as text for reading: gzip and deflate are
// decoded, bounded by limit against decompression bombs (errTooLarge
// beyond); the bytes that travel on are never touched.
func decodeBody(h http.Header, body []byte, limit int64) ([]byte, error) {
	var r io.Reader
	switch strings.ToLower(strings.TrimSpace(h.Get("Content-Encoding"))) {
	case "", "identity":
		return body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, errUndecodable
		}
		r = zr
	case "deflate":
		// HTTP's deflate is zlib-wrapped; some servers send it raw.
		zr, err := zlib.NewReader(bytes.NewReader(body))
		if err != nil {
			r = flate.NewReader(bytes.NewReader(body))
		} else {
			r = zr
		}
	default:
		return nil, errUndecodable
	}
	out, err := io.ReadAll(io.LimitReader(r, limit+1))
	switch {
	case err != nil:
		return nil, errUndecodable
	case int64(len(out)) > limit:
		return nil, errTooLarge
	}
	return out, nil
}
