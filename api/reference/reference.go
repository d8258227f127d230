// Package reference serves the API reference page at /api/docs: Redoc's
// standalone bundle (vendored from npm, see scripts/vendor-redoc.sh, MIT
// licensed: static/redoc-LICENSE.txt) rendering the OpenAPI document the
// server serves. Nothing is fetched from elsewhere: the page's
// Content-Security-Policy allows only this origin. It is separate from the
// admin UI and costs the UI's pages nothing.
package reference

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"net/http"
	"strings"
	"sync"
)

// RedocVersion is the vendored Redoc release.
const RedocVersion = "2.5.2"

// ScriptPath is where the page loads Redoc from.
const ScriptPath = "/api/docs/redoc.standalone.js"

//go:embed static/redoc.standalone.js
var redocJS []byte

// csp lets Redoc run from this origin only: it styles with inline style
// elements and runs its search in a worker made from a blob. Its footer
// logo from its CDN is refused (and then hidden by Redoc itself).
const csp = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"font-src 'self' data:; connect-src 'self'; worker-src blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Page is the reference page for the document at specURL.
func Page(specURL string) http.Handler {
	page := []byte(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>task-service API reference</title>
<link rel="icon" href="data:,">
</head>
<body>
<redoc spec-url="` + specURL + `" hide-download-button="false" expand-responses="200,201" path-in-middle-panel></redoc>
<script src="` + ScriptPath + `?v=` + RedocVersion + `"></script>
<noscript>This page needs JavaScript. The document itself is at <a href="` + specURL + `">` + specURL + `</a>.</noscript>
</body>
</html>
`)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		_, _ = w.Write(page)
	})
}

// Script serves the Redoc bundle, gzipped for clients that accept it (a
// third of the size), cached for a day: its URL changes with the version.
func Script() http.Handler {
	var once sync.Once
	var gz []byte
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/javascript; charset=utf-8")
		h.Set("Cache-Control", "public, max-age=86400")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Add("Vary", "Accept-Encoding")
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			_, _ = w.Write(redocJS)
			return
		}
		once.Do(func() {
			var b bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
			_, _ = zw.Write(redocJS)
			_ = zw.Close()
			gz = b.Bytes()
		})
		h.Set("Content-Encoding", "gzip")
		_, _ = w.Write(gz)
	})
}
