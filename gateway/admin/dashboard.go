package admin

import (
	"bytes"
	"embed"
	"html"
	"net/http"
	"path"
	"strings"
)

//go:embed dashboard
var dashboardFS embed.FS

//go:embed dashboard/index.html
var indexHTML []byte

// dashboardAssets are the files next to index.html and their content types.
var dashboardAssets = map[string]string{
	"app.js":    "text/javascript; charset=utf-8",
	"style.css": "text/css; charset=utf-8",
}

// DashboardPaths are the paths the dashboard answers when mounted at prefix
// (such as "/admin"): the page and its assets.
func DashboardPaths(prefix string) []string {
	prefix = strings.TrimSuffix(prefix, "/")
	paths := []string{prefix, prefix + "/"}
	for name := range dashboardAssets {
		paths = append(paths, prefix+"/"+name)
	}
	return paths
}

// dashboardCSP lets the page load only its own files and call only its own
// origin; the charts are SVG elements built by app.js.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// DashboardHandler serves the dashboard: index.html for a path ending in
// "/", and its script and stylesheet by their names, wherever it is mounted
// (the gateway mounts it at /admin/, unauthenticated: the page itself holds
// no data and calls the API at Config.APIPath with the key the operator
// pastes). Other paths are redirected to the same path with a "/" added.
// Mount it without stripping the prefix, for GET /admin and GET /admin/*.
func (a *API) DashboardHandler() http.Handler {
	index := bytes.ReplaceAll(indexHTML, []byte("{{API_PATH}}"), []byte(html.EscapeString(a.cfg.APIPath)))
	index = bytes.ReplaceAll(index, []byte("{{DEPLOYMENT}}"), []byte(html.EscapeString(a.cfg.Deployment)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", dashboardCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		p := r.URL.Path
		if strings.HasSuffix(p, "/") || p == "" {
			h.Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write(index)
			return
		}
		name := path.Base(p)
		if ct, ok := dashboardAssets[name]; ok {
			body, err := dashboardFS.ReadFile("dashboard/" + name)
			if err != nil {
				http.Error(w, "asset missing", http.StatusInternalServerError)
				return
			}
			h.Set("Content-Type", ct)
			_, _ = w.Write(body)
			return
		}
		http.Redirect(w, r, name+"/", http.StatusMovedPermanently)
	})
}
