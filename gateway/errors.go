package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/parleyhq/parley/schema"
)

// Domain errors the handlers return; errorHandler maps each to its status
// and code. Wrap them with %w to add detail: the message of the wrapping
// error is what the client reads.
var (
	ErrBadRequest      = errors.New("bad request")
	ErrUnauthorized    = errors.New("missing or unknown api key")
	ErrForbidden       = errors.New("forbidden")
	ErrNotFound        = errors.New("not found")
	ErrSessionEnded    = errors.New("session has ended")
	ErrTurnInProgress  = errors.New("another message of this session is being answered")
	ErrTooLarge        = errors.New("too large")
	ErrRateLimited     = errors.New("rate limited")
	ErrRequestTimeout  = errors.New("request timed out")
	ErrEventsUnlogged  = errors.New("session events could not be logged")
	errClientCancelled = errors.New("client went away")
)

// retryError carries how long a client should wait (429's Retry-After).
type retryError struct {
	err   error
	after time.Duration
}

func (e *retryError) Error() string { return e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

// errorStatus maps err to its HTTP status and machine-readable code; a
// status without a domain error takes the code of schema.ErrorCode.
func errorStatus(err error) (int, string) {
	var he *echo.HTTPError
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest, "bad_request"
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized, "unauthorized"
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden, "forbidden"
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound, "not_found"
	case errors.Is(err, ErrSessionEnded):
		return http.StatusConflict, "session_ended"
	case errors.Is(err, ErrTurnInProgress):
		return http.StatusConflict, "turn_in_progress"
	case errors.Is(err, ErrTooLarge), errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, "too_large"
	case errors.Is(err, ErrRateLimited):
		return http.StatusTooManyRequests, "rate_limited"
	case errors.Is(err, ErrOverloaded):
		return http.StatusTooManyRequests, "overloaded"
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrEventsUnlogged), storeUnreachable(err):
		return http.StatusServiceUnavailable, "unavailable"
	case errors.Is(err, ErrRequestTimeout), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "timeout"
	case errors.As(err, &he):
		return he.Code, schema.ErrorCode(he.Code)
	}
	return http.StatusInternalServerError, "internal"
}

// storeUnreachable reports whether err says Redis is out of reach for now
// rather than that the request is wrong: a network error, a connection
// closed mid-reply, or a server that is failing over (a primary that is now
// a replica, one loading its data, a cluster slot moving).
func storeUnreachable(err error) bool {
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return false // echo's answer to the request, e.g. a body cut short (io.ErrUnexpectedEOF)
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	for _, prefix := range []string{"READONLY", "LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// errorHandler is the one place errors become responses:
// {"error":{"code","message"}} with the status of errorStatus, and
// Retry-After on 429 and 503. Internal errors are logged, not shown.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	if errors.Is(err, errClientCancelled) || errors.Is(c.Request().Context().Err(), context.Canceled) {
		s.log.Info("request cancelled by client", "route", c.Path())
		c.Response().WriteHeader(499) // nginx's "client closed request", for logs and metrics only
		return
	}
	status, code := errorStatus(err)
	msg := err.Error()
	var he *echo.HTTPError
	if errors.As(err, &he) {
		if m, ok := he.Message.(string); ok {
			msg = m
		} else {
			msg = http.StatusText(status)
		}
	}
	switch {
	case status >= 500 && status != http.StatusServiceUnavailable && status != http.StatusGatewayTimeout:
		s.log.Error("request failed", "route", c.Path(), "err", err)
		msg = "internal error"
	case errors.Is(err, ErrEventsUnlogged):
		// Before the net.Error case: a spool write that failed with a
		// syscall.Errno (ENOSPC) satisfies net.Error too.
		s.log.Warn("session events could not be logged", "route", c.Path(), "err", err)
	case storeUnreachable(err):
		s.log.Warn("session store unreachable", "route", c.Path(), "err", err)
		msg = "session store unavailable"
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		after := time.Second
		var re *retryError
		if errors.As(err, &re) && re.after > after {
			after = re.after
		}
		c.Response().Header().Set("Retry-After", strconv.Itoa(int((after+time.Second-1)/time.Second)))
	}
	if err := c.JSON(status, schema.ErrorBody{Error: schema.ErrorDetail{Code: code, Message: msg}}); err != nil {
		s.log.Info("write error response", "err", err)
	}
}
