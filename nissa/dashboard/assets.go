package dashboard

import (
	"bytes"
	"embed"
	"net/http"
	"time"
)

// The page: one HTML file, its script and its style sheet, hand-written
// (SVG charts drawn by the script), embedded in the binary.
//
//go:embed assets/index.html assets/dashboard.js assets/dashboard.css
var assetFS embed.FS

// assets are the files /assets/{name} serves, by name only (no request
// path reaches a file system), with their content types.
var assets = map[string]string{
	"dashboard.js":  "text/javascript; charset=utf-8",
	"dashboard.css": "text/css; charset=utf-8",
}

// startTime stamps the embedded assets for conditional requests.
var startTime = time.Now()

func serveEmbedded(w http.ResponseWriter, r *http.Request, name, ctype string) {
	b, err := assetFS.ReadFile("assets/" + name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, startTime, bytes.NewReader(b))
}

func (s *Server) serveIndex(w http.ResponseWriter, r *http.Request) {
	serveEmbedded(w, r, "index.html", "text/html; charset=utf-8")
}

func (s *Server) serveAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctype, ok := assets[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	serveEmbedded(w, r, name, ctype)
}
