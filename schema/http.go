package schema

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"unicode/utf8"
)

// idRE bounds the ids that clients choose (player and NPC ids): printable,
// no spaces or separators that could break a Redis key or a log line.
var idRE = regexp.MustCompile(`^[A-Za-z0-9._:@-]{1,128}$`)

func validID(field, s string) error {
	if !idRE.MatchString(s) {
		return fmt.Errorf("%s %q must be 1-128 characters of A-Z a-z 0-9 . _ : @ -", field, s)
	}
	return nil
}

func validText(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s is required", field)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8", field)
	}
	return nil
}

// CreateSessionRequest is the body of POST /v1/sessions.
type CreateSessionRequest struct {
	PlayerID string      `json:"player_id"`
	NPCID    string      `json:"npc_id,omitempty"`
	Client   *ClientMeta `json:"client,omitempty"`
}

// Validate checks the ids of a new session.
func (r CreateSessionRequest) Validate() error {
	if err := validID("player_id", r.PlayerID); err != nil {
		return err
	}
	if r.NPCID != "" {
		return validID("npc_id", r.NPCID)
	}
	return nil
}

// EndSessionRequest is the optional body of POST /v1/sessions/{id}/end:
// why the game ends the session.
type EndSessionRequest struct {
	// Reason is player_ended (the default) when the player left, or
	// max_turns when the game's own limit on exchanges ended it: a cut the
	// learner does not count as the player's decision to quit.
	Reason EndReason `json:"reason,omitempty" jsonschema:"enum=player_ended,enum=max_turns"`
}

// Validate accepts the reasons a client may give.
func (r EndSessionRequest) Validate() error {
	switch r.Reason {
	case "", EndPlayerEnded, EndMaxTurns:
		return nil
	}
	return fmt.Errorf("reason %q must be %s or %s", r.Reason, EndPlayerEnded, EndMaxTurns)
}

// CreateSessionResponse answers POST /v1/sessions.
type CreateSessionResponse struct {
	SessionID     string `json:"session_id"`
	Greeting      string `json:"greeting,omitempty"`
	PolicyVersion string `json:"policy_version"`
	Arm           string `json:"arm,omitempty"`
}

// Validate checks that the response names its session.
func (r CreateSessionResponse) Validate() error {
	if r.SessionID == "" || r.PolicyVersion == "" {
		return errors.New("create session response: session_id and policy_version are required")
	}
	return nil
}

// MessageRequest is the body of POST /v1/sessions/{id}/messages.
type MessageRequest struct {
	Text string `json:"text"`
}

// Validate checks that the message has text in UTF-8.
func (r MessageRequest) Validate() error { return validText("text", r.Text) }

// MessageResponse answers a message: the NPC's reply and the exchange index.
// With Accept: text/event-stream it is the data of the final "done" event.
type MessageResponse struct {
	Reply  string    `json:"reply"`
	Turn   int       `json:"turn"`
	Safety Safety    `json:"safety,omitempty"`
	Ended  EndReason `json:"ended,omitempty"`
}

// Validate checks the exchange index.
func (r MessageResponse) Validate() error {
	if r.Turn < 1 {
		return fmt.Errorf("message response: turn %d must be at least 1", r.Turn)
	}
	return nil
}

// Exchange is one user message and the NPC's reply.
type Exchange struct {
	Turn   int    `json:"turn"`
	User   string `json:"user"`
	NPC    string `json:"npc"`
	Safety Safety `json:"safety,omitempty"`
}

// SessionView answers GET /v1/sessions/{id}: the session and its transcript.
type SessionView struct {
	SessionID     string     `json:"session_id"`
	PlayerID      string     `json:"player_id"`
	NPCID         string     `json:"npc_id"`
	PolicyVersion string     `json:"policy_version"`
	Arm           string     `json:"arm,omitempty"`
	Turns         int        `json:"turns"`
	Ended         EndReason  `json:"ended,omitempty"`
	Transcript    []Exchange `json:"transcript"`
}

// Validate checks the view's ids and that the transcript is numbered 1..n.
func (v SessionView) Validate() error {
	if v.SessionID == "" || v.PlayerID == "" || v.PolicyVersion == "" {
		return errors.New("session view: session_id, player_id and policy_version are required")
	}
	for i, x := range v.Transcript {
		if x.Turn < 1 || (i > 0 && x.Turn <= v.Transcript[i-1].Turn) {
			return fmt.Errorf("session view: transcript turn %d out of order", x.Turn)
		}
	}
	return nil
}

// ErrorBody is the JSON of every error response: {"error":{"code","message"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is a machine-readable code and a human-readable message.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Validate checks that the error says what happened.
func (b ErrorBody) Validate() error {
	if b.Error.Code == "" || b.Error.Message == "" {
		return errors.New("error body: code and message are required")
	}
	return nil
}

// ErrorCode is the code an error response of the given HTTP status carries
// when no more specific one applies: the one status→code table of every
// Parley API (the player API, OpenAI-compatible routes and the admin API).
// 429 is "rate_limited" (the gateway's overload refusal, also a 429, says
// "overloaded"); other 4xx default to "bad_request", 5xx to "internal".
func ErrorCode(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "bad_request"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusConflict:
		return "conflict"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusTooManyRequests:
		return "rate_limited"
	case http.StatusServiceUnavailable:
		return "unavailable"
	case http.StatusGatewayTimeout:
		return "timeout"
	}
	if status < 500 {
		return "bad_request"
	}
	return "internal"
}

// ChatMessage is one message of the OpenAI-compatible chat API.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatCompletionRequest is the body of POST /v1/chat/completions: the subset
// of OpenAI's request that Parley honours, and the OpenAI parameters it
// refuses (Unsupported) rather than ignore. Fields it does not know at all
// are ignored.
type ChatCompletionRequest struct {
	// Model is informational: the deployment's experiment picks the version,
	// and the response's model names it.
	Model       string        `json:"model,omitempty"`
	Messages    []ChatMessage `json:"messages"`
	Temperature *float64      `json:"temperature,omitempty"`
	TopP        *float64      `json:"top_p,omitempty"`
	MaxTokens   *int          `json:"max_tokens,omitempty"`
	// MaxCompletionTokens is OpenAI's newer name of max_tokens; it wins when both are set.
	MaxCompletionTokens *int           `json:"max_completion_tokens,omitempty"`
	Stream              bool           `json:"stream,omitempty"`
	StreamOptions       *StreamOptions `json:"stream_options,omitempty"`
	// User is the player: their rate limit, A/B arm and logged session.
	User string `json:"user,omitempty"`
	// Seed makes sampling repeatable: the same seed, messages, parameters
	// and model version give the same reply.
	Seed *int64 `json:"seed,omitempty"`
	Unsupported
}

// Validate checks roles, texts and the sampling ranges.
func (r ChatCompletionRequest) Validate() error {
	if len(r.Messages) == 0 {
		return errors.New("messages is required")
	}
	for i, m := range r.Messages {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			return fmt.Errorf("messages[%d].role %q is not system, user or assistant", i, m.Role)
		}
		if !utf8.ValidString(m.Content) {
			return fmt.Errorf("messages[%d].content is not valid UTF-8", i)
		}
	}
	if r.Messages[len(r.Messages)-1].Role != "user" {
		return errors.New("the last message must have role user")
	}
	if t := r.Temperature; t != nil && (*t < 0 || *t > 2) {
		return fmt.Errorf("temperature %g must be in [0, 2]", *t)
	}
	if p := r.TopP; p != nil && (*p <= 0 || *p > 1) {
		return fmt.Errorf("top_p %g must be in (0, 1]", *p)
	}
	if n := r.MaxTokens; n != nil && *n < 1 {
		return fmt.Errorf("max_tokens %d must be at least 1", *n)
	}
	if n := r.MaxCompletionTokens; n != nil && *n < 1 {
		return fmt.Errorf("max_completion_tokens %d must be at least 1", *n)
	}
	if r.StreamOptions != nil && !r.Stream {
		return errors.New("stream_options is only allowed with stream true")
	}
	if err := r.Unsupported.Validate(); err != nil {
		return err
	}
	if r.User != "" {
		return validID("user", r.User)
	}
	return nil
}

// ChatCompletionResponse answers a non-streaming chat completion.
type ChatCompletionResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"` // "chat.completion"
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   ChatUsage    `json:"usage"`
}

// Validate checks that the response has exactly one choice.
func (r ChatCompletionResponse) Validate() error {
	if r.ID == "" || r.Object != "chat.completion" || len(r.Choices) != 1 {
		return errors.New("chat completion: id, object chat.completion and one choice are required")
	}
	return nil
}

// ChatChoice is one completion.
type ChatChoice struct {
	Index        int         `json:"index"`
	Message      ChatMessage `json:"message"`
	FinishReason string      `json:"finish_reason"`
}

// ChatUsage counts the tokens of a completion.
type ChatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// ChatCompletionChunk is one server-sent event of a streaming chat completion.
type ChatCompletionChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"` // "chat.completion.chunk"
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
	// Usage is set on the last chunk only, which has no choices, when the
	// request asked for it with stream_options.include_usage.
	Usage *ChatUsage `json:"usage,omitempty"`
}

// Validate checks the chunk's identity: one choice, or none on the usage chunk.
func (c ChatCompletionChunk) Validate() error {
	if c.ID == "" || c.Object != "chat.completion.chunk" {
		return errors.New("chat completion chunk: id and object chat.completion.chunk are required")
	}
	if ok := c.Usage == nil && len(c.Choices) == 1 || c.Usage != nil && len(c.Choices) == 0; !ok {
		return errors.New("chat completion chunk: one choice, or none with usage, is required")
	}
	return nil
}

// ChatChunkChoice carries the new text of a streaming completion.
type ChatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        ChatDelta `json:"delta"`
	FinishReason *string   `json:"finish_reason"`
}

// ChatDelta is the part of a message a chunk adds.
type ChatDelta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
}
