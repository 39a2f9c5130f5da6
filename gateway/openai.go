package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/parleyhq/parley/schema"
)

// POST /v1/chat/completions: OpenAI's chat API, stream and non-stream, so
// existing OpenAI client libraries work. It keeps no session and logs no
// events; the safety guard and the rate limits apply (the player bucket is
// the request's "user" when set). Without a system message the default
// NPC's card is the system prompt.
func (s *Server) chatCompletionsHandler(c echo.Context) error {
	ctx := c.Request().Context()
	p := principalOf(c)
	body, err := readBody(c.Request().Body, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	var req schema.ChatCompletionRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	last := req.Messages[len(req.Messages)-1].Content
	if strings.TrimSpace(last) == "" {
		return fmt.Errorf("%w: the last message is blank", ErrBadRequest)
	}
	if len(last) > s.cfg.MaxMessageBytes {
		return fmt.Errorf("%w: the last message is %d bytes, over the limit of %d", ErrTooLarge, len(last), s.cfg.MaxMessageBytes)
	}
	if err := s.limit(ctx, p.ClientID, req.User); err != nil {
		return err
	}
	asg, err := s.router.Assign(ctx, req.User)
	if err != nil {
		return fmt.Errorf("assign policy: %w", err)
	}
	gen, release, err := s.router.Acquire(ctx, asg.PolicyVersion)
	if err != nil {
		return fmt.Errorf("engine of %s: %w", asg.PolicyVersion, err)
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()

	defaultCard := s.cfg.Personas[s.cfg.DefaultNPC].Card
	id := "chatcmpl-" + uuid.Must(uuid.NewV7()).String()
	created := s.now().Unix()
	model := s.cfg.Deployment + "/" + asg.PolicyVersion
	sse := &sseWriter{c: c}
	chunk := func(delta schema.ChatDelta, finish *string) schema.ChatCompletionChunk {
		return schema.ChatCompletionChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model,
			Choices: []schema.ChatChunkChoice{{Delta: delta, FinishReason: finish}}}
	}
	var onPiece func(string) error
	if req.Stream {
		onPiece = func(piece string) error { return sse.send("", chunk(schema.ChatDelta{Content: piece}, nil)) }
	}

	verdict := s.guard.CheckInput(last)
	var out generated
	if verdict.Safety == schema.SafetyNone {
		gr := s.request(nil, gen.Tokenizer())
		if t := req.Temperature; t != nil {
			gr.Temperature = float32(*t)
		}
		if tp := req.TopP; tp != nil {
			gr.TopP = float32(*tp)
		}
		if n := req.MaxTokens; n != nil {
			gr.MaxTokens = min(*n, gen.MaxSeq()/2)
		}
		if gr.Prompt, err = chatPrompt(gen.Tokenizer(), defaultCard, req.Messages, gen.MaxSeq(), gr.MaxTokens); err != nil {
			return err
		}
		if req.Stream {
			if err := sse.send("", chunk(schema.ChatDelta{Role: "assistant"}, nil)); err != nil {
				return fmt.Errorf("%w: %w", errClientCancelled, err)
			}
		}
		if out, err = s.generate(ctx, gen, gr, onPiece); err != nil {
			return sse.fail(s, err)
		}
		verdict = s.guard.CheckOutput(out.Text, defaultCard)
	} else if req.Stream {
		if err := sse.send("", chunk(schema.ChatDelta{Role: "assistant", Content: verdict.Reply}, nil)); err != nil {
			return fmt.Errorf("%w: %w", errClientCancelled, err)
		}
	}
	text, finish := out.Text, out.Completion.FinishReason
	if verdict.Safety != schema.SafetyNone {
		text, finish = verdict.Reply, "content_filter"
	}
	if finish == "" || finish == "cancelled" {
		finish = "stop"
	}
	if req.Stream {
		if err := sse.send("", chunk(schema.ChatDelta{}, &finish)); err != nil {
			return fmt.Errorf("%w: %w", errClientCancelled, err)
		}
		if err := sse.send("", "[DONE]"); err != nil {
			return fmt.Errorf("%w: %w", errClientCancelled, err)
		}
		return nil
	}
	u := schema.ChatUsage{PromptTokens: out.Completion.PromptTokens, CompletionTokens: out.Completion.CompletionTokens}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return c.JSON(http.StatusOK, schema.ChatCompletionResponse{
		ID: id, Object: "chat.completion", Created: created, Model: model, Usage: u,
		Choices: []schema.ChatChoice{{Message: schema.ChatMessage{Role: "assistant", Content: text}, FinishReason: finish}},
	})
}
