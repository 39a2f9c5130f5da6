// Package client is a Go client of Parley's player API: sessions
// (Client.CreateSession, Client.Session, Client.EndSession), messages whole
// or streamed as server-sent events (Client.SendMessage,
// Client.StreamMessage), and the OpenAI-compatible chat completions
// (Client.ChatCompletion, Client.StreamChatCompletion, which WithSession
// makes turns of a logged session). Error answers are
// *Error, which carries the status, the JSON error code and Retry-After.
// It imports only the standard library and package schema.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/parleyhq/parley/schema"
)

// maxBody bounds a JSON answer and one server-sent event.
const maxBody = 1 << 20

// ErrInvalidResponse reports an answer that is not the JSON the contract
// promises.
var ErrInvalidResponse = errors.New("invalid gateway response")

// Error is an error answer of the gateway: its status, the code and message
// of its {"error":{"code","message"}} body (schema.ErrorCode of the status
// when the body has none), and how long Retry-After asks to wait (0 when
// absent). A stream that fails after it started carries status 200 and the
// code of its "error" event.
type Error struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("gateway: %d %s: %s", e.Status, e.Code, e.Message)
}

// Client calls the player API of one gateway. It is safe for concurrent use.
type Client struct {
	// BaseURL is the gateway's root, such as "http://127.0.0.1:8080".
	BaseURL string
	// APIKey is a player-client key, sent as a bearer token.
	APIKey string
	// HTTP sends the requests; nil: http.DefaultClient. Requests are bounded
	// by their context.
	HTTP *http.Client
}

// CreateSession starts a session (POST /v1/sessions).
func (c *Client) CreateSession(ctx context.Context, req schema.CreateSessionRequest) (schema.CreateSessionResponse, error) {
	var out schema.CreateSessionResponse
	if err := c.call(ctx, http.MethodPost, "/v1/sessions", nil, req, &out); err != nil {
		return out, err
	}
	return out, valid("/v1/sessions", out.Validate())
}

// SendMessage sends the player's text and returns the NPC's whole reply
// (POST /v1/sessions/{id}/messages).
func (c *Client) SendMessage(ctx context.Context, sessionID, text string) (schema.MessageResponse, error) {
	var out schema.MessageResponse
	path := sessionPath(sessionID) + "/messages"
	if err := c.call(ctx, http.MethodPost, path, nil, schema.MessageRequest{Text: text}, &out); err != nil {
		return out, err
	}
	return out, valid(path, out.Validate())
}

// StreamMessage is SendMessage with the reply streamed: onToken (when not
// nil) gets each piece of text as it is generated (an error from it stops
// the stream and is returned), and the final "done" event is returned.
func (c *Client) StreamMessage(ctx context.Context, sessionID, text string, onToken func(string) error) (schema.MessageResponse, error) {
	var out schema.MessageResponse
	path := sessionPath(sessionID) + "/messages"
	resp, err := c.send(ctx, http.MethodPost, path, schema.MessageRequest{Text: text}, "text/event-stream", nil)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	done := false
	err = readEvents(resp.Body, func(name, data string) (bool, error) {
		switch name {
		case "token":
			var t struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal([]byte(data), &t); err != nil {
				return false, fmt.Errorf("%w: token event: %w", ErrInvalidResponse, err)
			}
			if onToken == nil {
				return false, nil
			}
			return false, onToken(t.Text)
		case "done":
			if err := json.Unmarshal([]byte(data), &out); err != nil {
				return false, fmt.Errorf("%w: done event: %w", ErrInvalidResponse, err)
			}
			done = true
			return true, out.Validate()
		case "error":
			return false, streamError(data)
		}
		return false, nil
	})
	if err == nil && !done {
		err = fmt.Errorf("%w: the stream ended without a done event", ErrInvalidResponse)
	}
	if err != nil {
		return out, fmt.Errorf("stream %s: %w", path, err)
	}
	return out, nil
}

// Session returns the session and its transcript (GET /v1/sessions/{id}).
func (c *Client) Session(ctx context.Context, sessionID string) (schema.SessionView, error) {
	var out schema.SessionView
	path := sessionPath(sessionID)
	if err := c.call(ctx, http.MethodGet, path, nil, nil, &out); err != nil {
		return out, err
	}
	return out, valid(path, out.Validate())
}

// EndSession ends the session with reason ("" for player_ended; max_turns
// when the game's own limit on exchanges ends it) and returns its final
// view (POST /v1/sessions/{id}/end); an answer without a body gives a zero
// view.
func (c *Client) EndSession(ctx context.Context, sessionID string, reason schema.EndReason) (schema.SessionView, error) {
	var out schema.SessionView
	path := sessionPath(sessionID) + "/end"
	if err := c.call(ctx, http.MethodPost, path, nil, schema.EndSessionRequest{Reason: reason}, &out); err != nil {
		return out, err
	}
	if out.SessionID == "" {
		return out, nil
	}
	return out, valid(path, out.Validate())
}

// sessionHeader names the Parley session a chat completion continues
// (gateway.SessionHeader).
const sessionHeader = "X-Parley-Session"

// ChatOption adjusts a chat-completion request.
type ChatOption func(http.Header)

// WithSession makes a chat completion the next turn of the caller's session
// id, a UUID the game picks (X-Parley-Session): the first request with a new
// id starts the session for the player in the request's User field, which
// that request must set, and the session then ends like any other, after
// the idle timeout or through EndSession. Session reads its transcript.
func WithSession(id string) ChatOption {
	return func(h http.Header) { h.Set(sessionHeader, id) }
}

// ChatCompletion answers an OpenAI-style chat request whole
// (POST /v1/chat/completions; req.Stream is ignored).
func (c *Client) ChatCompletion(ctx context.Context, req schema.ChatCompletionRequest, opts ...ChatOption) (schema.ChatCompletionResponse, error) {
	var out schema.ChatCompletionResponse
	req.Stream = false
	const path = "/v1/chat/completions"
	if err := c.call(ctx, http.MethodPost, path, chatHeader(opts), req, &out); err != nil {
		return out, err
	}
	return out, valid(path, out.Validate())
}

// StreamChatCompletion is ChatCompletion streamed: onChunk (when not nil)
// gets every chunk until the stream's [DONE] (an error from it stops the
// stream and is returned).
func (c *Client) StreamChatCompletion(ctx context.Context, req schema.ChatCompletionRequest, onChunk func(schema.ChatCompletionChunk) error, opts ...ChatOption) error {
	req.Stream = true
	const path = "/v1/chat/completions"
	resp, err := c.send(ctx, http.MethodPost, path, req, "text/event-stream", chatHeader(opts))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	done := false
	err = readEvents(resp.Body, func(name, data string) (bool, error) {
		switch {
		case name == "error":
			return false, streamError(data)
		case data == "[DONE]":
			done = true
			return true, nil
		}
		var ch schema.ChatCompletionChunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return false, fmt.Errorf("%w: chunk: %w", ErrInvalidResponse, err)
		}
		if err := ch.Validate(); err != nil {
			return false, fmt.Errorf("%w: %w", ErrInvalidResponse, err)
		}
		if onChunk == nil {
			return false, nil
		}
		return false, onChunk(ch)
	})
	if err == nil && !done {
		err = fmt.Errorf("%w: the stream ended without [DONE]", ErrInvalidResponse)
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", path, err)
	}
	return nil
}

// chatHeader is the header opts set; nil without options.
func chatHeader(opts []ChatOption) http.Header {
	if len(opts) == 0 {
		return nil
	}
	h := http.Header{}
	for _, o := range opts {
		o(h)
	}
	return h
}

// WaitReady polls GET /readyz until the gateway answers 200 or ctx is done.
func (c *Client) WaitReady(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url("/readyz"), nil)
		if err != nil {
			return fmt.Errorf("wait ready: %w", err)
		}
		if resp, err := c.httpClient().Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", c.url("/readyz"), ctx.Err())
		case <-t.C:
		}
	}
}

// call sends a JSON request, with header's fields besides its own, and
// decodes a 2xx JSON answer into out.
func (c *Client) call(ctx context.Context, method, path string, header http.Header, body, out any) error {
	resp, err := c.send(ctx, method, path, body, "application/json", header)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: %w: %w", method, path, ErrInvalidResponse, err)
	}
	return nil
}

// send makes the request, with header's fields besides its own, and
// returns a 2xx answer, or the answer as *Error.
func (c *Client) send(ctx context.Context, method, path string, body any, accept string, header http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		payload, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(path), rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", accept)
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		if accept == "text/event-stream" && !isEventStream(resp) {
			resp.Body.Close()
			return nil, fmt.Errorf("%s %s: %w: content type %q", method, path, ErrInvalidResponse, resp.Header.Get("Content-Type"))
		}
		return resp, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	apiErr := &Error{Status: resp.StatusCode, Code: schema.ErrorCode(resp.StatusCode), Message: strings.TrimSpace(string(data)),
		RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var eb schema.ErrorBody
	if json.Unmarshal(data, &eb) == nil && eb.Validate() == nil {
		apiErr.Code, apiErr.Message = eb.Error.Code, eb.Error.Message
	}
	return nil, fmt.Errorf("%s %s: %w", method, path, apiErr)
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) url(path string) string { return strings.TrimRight(c.BaseURL, "/") + path }

func sessionPath(id string) string { return "/v1/sessions/" + url.PathEscape(id) }

func valid(path string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w: %w", path, ErrInvalidResponse, err)
	}
	return nil
}

func isEventStream(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "text/event-stream"
}

// streamError turns the data of an "error" event into *Error.
func streamError(data string) error {
	var eb schema.ErrorBody
	if err := json.Unmarshal([]byte(data), &eb); err != nil || eb.Validate() != nil {
		return fmt.Errorf("%w: error event %q", ErrInvalidResponse, data)
	}
	return &Error{Status: http.StatusOK, Code: eb.Error.Code, Message: eb.Error.Message}
}

// readEvents calls fn with the name and data of each server-sent event until
// fn says the stream is done, fn fails, or the stream ends.
func readEvents(r io.Reader, fn func(name, data string) (bool, error)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxBody)
	var name string
	var data []string
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if len(data) > 0 {
				done, err := fn(name, strings.Join(data, "\n"))
				if done || err != nil {
					return err
				}
			}
			name, data = "", nil
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			data = append(data, value)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read stream: %w", err)
	}
	return nil
}

// retryAfter reads a Retry-After header (seconds or an HTTP date) as a
// wait from now; 0 when absent, unreadable or past.
func retryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(h, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
