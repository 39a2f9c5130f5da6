package gateway

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/parleyhq/parley/schema"
)

// readBody reads at most limit bytes of a request body: ErrTooLarge beyond.
func readBody(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read body: %w", ErrBadRequest, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: body is over %d bytes", ErrTooLarge, limit)
	}
	return b, nil
}

// decodeJSON decodes one JSON value from body into v. Invalid UTF-8,
// malformed JSON, a value of the wrong type or trailing data are ErrBadRequest.
func decodeJSON(body []byte, v any) error {
	if !utf8.Valid(body) {
		return fmt.Errorf("%w: body is not valid UTF-8", ErrBadRequest)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return fmt.Errorf("%w: body is empty; send a JSON object", ErrBadRequest)
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%w: field %q must be %s", ErrBadRequest, te.Field, te.Type)
		}
		return fmt.Errorf("%w: body is not valid JSON: %w", ErrBadRequest, err)
	}
	return nil
}

// parseEndReason decodes and checks the optional body of an end request
// (schema.EndSessionRequest): its reason, player_ended when the body is
// empty or gives none.
func parseEndReason(body []byte) (schema.EndReason, error) {
	var req schema.EndSessionRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeJSON(body, &req); err != nil {
			return "", err
		}
		if err := req.Validate(); err != nil {
			return "", fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	}
	return cmp.Or(req.Reason, schema.EndPlayerEnded), nil
}

// parseMessage decodes and checks the body of a player message.
func parseMessage(body []byte, maxMessageBytes int) (schema.MessageRequest, error) {
	m, ok := scanMessage(string(body))
	if !ok {
		if err := decodeJSON(body, &m); err != nil {
			return m, err
		}
	}
	if err := m.Validate(); err != nil {
		return m, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if strings.TrimSpace(m.Text) == "" {
		return m, fmt.Errorf("%w: text is blank", ErrBadRequest)
	}
	if len(m.Text) > maxMessageBytes {
		return m, fmt.Errorf("%w: text is %d bytes, over the limit of %d", ErrTooLarge, len(m.Text), maxMessageBytes)
	}
	return m, nil
}

// scanMessage reads body if it is exactly what json.Marshal writes for a
// schema.MessageRequest whose text needs no escapes (what the gateway's
// client sends), the same as json.Unmarshal reads it; ok is false
// otherwise, and decodeJSON decodes it.
func scanMessage(body string) (schema.MessageRequest, bool) {
	var m schema.MessageRequest
	s := jsonScanner{rest: body}
	if !s.skip(`{"text":`) || !s.str(&m.Text) || !s.skip("}") || s.rest != "" {
		return schema.MessageRequest{}, false
	}
	return m, true
}

// utf8Chunker turns token texts, which may split a UTF-8 sequence between
// tokens, into valid UTF-8 pieces: it holds back an incomplete sequence at
// the end and replaces invalid bytes with U+FFFD. A reply is the
// concatenation of its pieces, streamed or not.
type utf8Chunker struct{ pending []byte }

func (u *utf8Chunker) push(s string) string {
	if len(u.pending) == 0 && utf8.ValidString(s) {
		return s // what the general case returns for it, without copies
	}
	u.pending = append(u.pending, s...)
	cut := len(u.pending)
	for i := len(u.pending) - 1; i >= 0 && i >= len(u.pending)-utf8.UTFMax+1; i-- {
		b := u.pending[i]
		if b < utf8.RuneSelf {
			break
		}
		if utf8.RuneStart(b) {
			if !utf8.FullRune(u.pending[i:]) {
				cut = i
			}
			break
		}
	}
	out := strings.ToValidUTF8(string(u.pending[:cut]), "\uFFFD")
	u.pending = append(u.pending[:0], u.pending[cut:]...)
	return out
}

func (u *utf8Chunker) flush() string {
	out := strings.ToValidUTF8(string(u.pending), "\uFFFD")
	u.pending = u.pending[:0]
	return out
}

// Bounds on reading away an oversized body after its 413: most clients
// send the whole body before they read the answer, and a connection closed
// on unread data reaches them as a reset instead of the 413.
const (
	drainBytes   = 16 << 20
	drainTimeout = 10 * time.Second
)

// limitBody answers 413 to a request whose declared Content-Length is over
// limit before its body is read. It then reads and discards up to
// drainBytes of the body, so that a client still sending gets to read the
// 413; a client that sent Expect: 100-continue never sends the body.
func limitBody(limit int64) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if r.ContentLength <= limit {
				return next(c)
			}
			rc := http.NewResponseController(c.Response())
			drain := r.ContentLength <= drainBytes && !strings.EqualFold(r.Header.Get("Expect"), "100-continue")
			if drain {
				_ = rc.EnableFullDuplex()
			} else {
				// What the client sends next is the unread body, not a request.
				c.Response().Header().Set(echo.HeaderConnection, "close")
			}
			c.Error(fmt.Errorf("%w: body of %d bytes is over %d", ErrTooLarge, r.ContentLength, limit))
			if drain {
				_ = rc.Flush()
				_ = rc.SetReadDeadline(time.Now().Add(drainTimeout))
				_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, drainBytes))
			}
			return nil
		}
	}
}
