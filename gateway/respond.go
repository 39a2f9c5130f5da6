package gateway

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/parleyhq/parley/schema"
)

// respondMessage answers a message with resp as c.JSON does. A response
// whose strings need no escapes (most replies), to a request that did not
// ask for ?pretty, is encoded without reflection into the same bytes.
func respondMessage(c echo.Context, resp schema.MessageResponse) error {
	if c.Request().URL.RawQuery != "" || c.Echo().Debug {
		return c.JSON(http.StatusOK, resp)
	}
	body, ok := appendMessageJSON(make([]byte, 0, 64+len(resp.Reply)), resp)
	if !ok {
		return c.JSON(http.StatusOK, resp)
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, body)
}

// appendMessageJSON appends what json.Encoder writes for resp (the JSON and
// a newline) when none of resp's strings holds a character encoding/json
// escapes; ok is false otherwise.
func appendMessageJSON(dst []byte, resp schema.MessageResponse) (_ []byte, ok bool) {
	if !plainJSON(resp.Reply) || !plainJSON(string(resp.Safety)) || !plainJSON(string(resp.Ended)) {
		return dst, false
	}
	dst = append(dst, `{"reply":"`...)
	dst = append(dst, resp.Reply...)
	dst = append(dst, `","turn":`...)
	dst = strconv.AppendInt(dst, int64(resp.Turn), 10)
	if resp.Safety != "" {
		dst = append(dst, `,"safety":"`...)
		dst = append(dst, resp.Safety...)
		dst = append(dst, '"')
	}
	if resp.Ended != "" {
		dst = append(dst, `,"ended":"`...)
		dst = append(dst, resp.Ended...)
		dst = append(dst, '"')
	}
	return append(dst, "}\n"...), true
}

// plainJSON reports whether encoding/json writes s as it is between quotes:
// printable ASCII other than the quote, the backslash and the HTML
// characters it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
