package gateway

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// openAPIDocument is the OpenAPI 3.1 description of the gateway, generated
// by package gateway/openapi (`make schemas`) and kept in the repository.
//
//go:embed openapi.json
var openAPIDocument []byte

// GET /openapi.json, without a key: the contract clients are generated from.
func openAPIHandler(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPIDocument)
}

// Routes lists every route the server answers, the admin API's included once
// it is registered, for the test that holds the OpenAPI description to the code.
func (s *Server) Routes() []*echo.Route { return s.echo.Routes() }
