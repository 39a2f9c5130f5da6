package admin

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/parleyhq/parley/schema"
)

// ErrorHandler writes errors as {"error":{"code","message"}}, for serving
// the API on an echo of its own (tests, a standalone admin server); inside
// the gateway, the gateway's handler does this. Errors other than
// *echo.HTTPError are logged and answered 500 without their text.
func ErrorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		status, msg := http.StatusInternalServerError, "internal error"
		var he *echo.HTTPError
		if errors.As(err, &he) {
			status = he.Code
			if m, ok := he.Message.(string); ok {
				msg = m
			} else {
				msg = http.StatusText(status)
			}
		} else {
			log.Error("admin request failed", "route", c.Path(), "err", err)
		}
		body := schema.ErrorBody{Error: schema.ErrorDetail{Code: schema.ErrorCode(status), Message: msg}}
		if err := c.JSON(status, body); err != nil {
			log.Info("write error response", "err", err)
		}
	}
}
