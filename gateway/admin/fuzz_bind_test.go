package admin

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/parleyhq/parley/schema"
)

// FuzzBindJSON decodes admin request bodies (the canary request and the
// other rollout changes) as the handlers do: any body is accepted or
// refused with a 400 or 413 HTTP error, never anything else.
func FuzzBindJSON(f *testing.F) {
	for _, s := range []string{
		`{"version":"v2","weight":10}`, `{"version":"v2","weight":10,"generation":3}`, `{"generation":1,"reason":"bad canary"}`,
		`{"version":"v2","weight":1e999}`, `{"version":2}`, `{"stable":"v9"}`, `null`, `[]`, ``, `{"version":"v2"} x`,
		"{\"version\":\"v\xff\",\"weight\":5}", strings.Repeat("[", 11000), `{"generation":99999999999999999999}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	e := echo.New()
	f.Fuzz(func(t *testing.T, body []byte, canary bool) {
		c := e.NewContext(httptest.NewRequest(http.MethodPost, "/admin/v1/rollout/canary", bytes.NewReader(body)), httptest.NewRecorder())
		var err error
		if canary {
			var req schema.CanaryRequest
			if err = bindJSON(c, &req, true); err == nil {
				if verr := req.Validate(); verr != nil {
					err = badRequest(verr)
				} else if req.Version == "" || req.Weight < 1 || req.Weight > 100 {
					t.Fatalf("canary body %q accepted as %+v", body, req)
				}
			}
		} else {
			var req ChangeRequest
			err = bindJSON(c, &req, false)
		}
		if err == nil {
			return
		}
		var he *echo.HTTPError
		if !errors.As(err, &he) || (he.Code != http.StatusBadRequest && he.Code != http.StatusRequestEntityTooLarge) {
			t.Fatalf("body %q: %v; want a 400 or 413 HTTP error", body, err)
		}
		if msg, ok := he.Message.(string); !ok || msg == "" {
			t.Fatalf("body %q: error %v without a message", body, err)
		}
	})
}
