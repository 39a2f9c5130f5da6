package schema

import (
	"net/http"
	"testing"
)

func TestErrorCode(t *testing.T) {
	for status, want := range map[int]string{
		http.StatusBadRequest: "bad_request", http.StatusUnauthorized: "unauthorized", http.StatusForbidden: "forbidden",
		http.StatusNotFound: "not_found", http.StatusMethodNotAllowed: "method_not_allowed", http.StatusConflict: "conflict",
		http.StatusRequestEntityTooLarge: "too_large", http.StatusTooManyRequests: "rate_limited",
		http.StatusServiceUnavailable: "unavailable", http.StatusGatewayTimeout: "timeout",
		http.StatusTeapot: "bad_request", http.StatusInternalServerError: "internal", http.StatusBadGateway: "internal",
	} {
		if got := ErrorCode(status); got != want {
			t.Errorf("ErrorCode(%d) = %q; want %q", status, got, want)
		}
	}
}
