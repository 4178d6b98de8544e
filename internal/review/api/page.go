package api

import (
	"bytes"
	"embed"
	"html"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// The review page: plain HTML, CSS and JavaScript with no dependencies,
// built into the binary. The page reaches the API by URLs relative to
// where it is served, so it works under any mount path.
//
//go:embed page/index.html page/review.js page/guarantee.js page/review.css
var pageFiles embed.FS

// loaded is when the binary started: the assets' Last-Modified.
var loaded = time.Now()

// pageCSP lets the page load its own script and style and talk to its own
// API, nothing else: item content is shown as text, and even if it were
// not, no injected script could run or send anything elsewhere.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// servePage serves the page at the mount's root. Under a mount that was
// reached without its trailing slash (/review rather than /review/), the
// page's relative URLs would resolve one level up, so it redirects first.
func (h *Handler) servePage(w http.ResponseWriter, r *http.Request) {
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok &&
		orig.URL != nil && !strings.HasSuffix(orig.URL.Path, "/") {
		target := orig.URL.Path + "/"
		if orig.URL.RawQuery != "" {
			target += "?" + orig.URL.RawQuery
		}
		http.Redirect(w, r, target, http.StatusMovedPermanently)
		return
	}
	user := authUser(r)
	if user == "" {
		serveAsset(w, r, "index.html")
		return
	}
	// Signed in: the page names the reviewer. The page is made for this
	// user, so it is served afresh, never from a cache.
	b, err := pageFiles.ReadFile("page/index.html")
	if err != nil {
		writeDetail(w, http.StatusNotFound, "not_found")
		return
	}
	meta := `<meta name="systemone-user" content="` + html.EscapeString(user) + `">` + "\n"
	b = bytes.Replace(b, []byte("<title>"), []byte(meta+"<title>"), 1)
	setPageHeaders(w.Header())
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b)
}

// setPageHeaders are the headers of every page file.
func setPageHeaders(h http.Header) {
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// serveAsset serves one embedded page file.
func serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	b, err := pageFiles.ReadFile("page/" + name)
	if err != nil {
		writeDetail(w, http.StatusNotFound, "not_found")
		return
	}
	h := w.Header()
	setPageHeaders(h)
	// Revalidate every time: a new binary may bring a new page.
	h.Set("Cache-Control", "no-cache")
	switch {
	case strings.HasSuffix(name, ".js"):
		h.Set("Content-Type", "text/javascript; charset=utf-8")
	case strings.HasSuffix(name, ".css"):
		h.Set("Content-Type", "text/css; charset=utf-8")
	default:
		h.Set("Content-Type", "text/html; charset=utf-8")
	}
	http.ServeContent(w, r, name, loaded, bytes.NewReader(b))
}
