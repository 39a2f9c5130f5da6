package gateway

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/parleyhq/parley/schema"
)

// versionLister is a Router that can say which versions it serves now.
type versionLister interface {
	Versions() []string
}

// GET /v1/models: what a key may name as the model of a chat completion,
// in OpenAI's form: the deployment (its experiment picks the version per
// player) and each deployment/version served now. The request's model is
// informational; the response's model names the version that answered.
func (s *Server) modelsHandler(c echo.Context) error {
	list := schema.ModelList{Object: "list", Data: []schema.Model{{ID: s.cfg.Deployment, Object: "model", OwnedBy: "parley"}}}
	if vl, ok := s.router.(versionLister); ok {
		for _, v := range vl.Versions() {
			list.Data = append(list.Data, schema.Model{ID: s.cfg.Deployment + "/" + v, Object: "model", OwnedBy: "parley"})
		}
	}
	return c.JSON(http.StatusOK, list)
}

// Versions is the version served, when an engine is loaded.
func (r *staticRouter) Versions() []string {
	if r.gen.Load() == nil {
		return nil
	}
	return []string{r.currentVersion()}
}

// Versions are the stable version and the canary, when one runs.
func (r poolRouter) Versions() []string {
	st := r.pool.Serving()
	var vs []string
	for _, v := range []string{st.Stable, st.Canary} {
		if v != "" {
			vs = append(vs, v)
		}
	}
	return vs
}
