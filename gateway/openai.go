package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/parleyhq/parley/schema"
)

// SessionHeader names, in a request to POST /v1/chat/completions, the
// session the completion continues, and in its response the session it
// was logged in.
const SessionHeader = "X-Parley-Session"

// openAISeedSalt maps a request's seed to the engine's sampling seed, in
// which 0 means nondeterministic: only the seed equal to the salt maps to 0.
const openAISeedSalt = 0x9e3779b97f4a7c15

// POST /v1/chat/completions: OpenAI's chat API, stream and non-stream, so
// that OpenAI's client libraries work. The prompt is the request's messages:
// a client's system messages replace the default NPC's persona card, and
// without one the card is the system prompt; the safety guard and the rate
// limits apply either way (the player bucket is the request's "user").
//
// A completion is logged, with the same Kafka events as the native API, in
// one of three ways:
//   - With X-Parley-Session: <uuid>, it is the next turn of that session of
//     the caller's client. The first request with a new id starts the
//     session for the player "user" (required then), pinning its version and
//     arm; it ends like any session, after the idle timeout or by
//     POST /v1/sessions/{id}/end. The response echoes the header.
//   - Without the header but with "user", it is a session of one exchange:
//     session_started, turn and session_ended (max_turns) are logged at once.
//   - With neither, nothing is logged.
//
// Parameters Parley does not implement (n > 1, tools, …) are answered 400.
func (s *Server) chatCompletionsHandler(c echo.Context) error {
	start := time.Now()
	ctx := c.Request().Context()
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
	conv, err := s.openChat(ctx, principalOf(c).ClientID, c.Request().Header.Get(SessionHeader), req.User)
	if err != nil {
		return err
	}
	defer conv.lock.unlock(ctx)
	if conv.lock != nil {
		c.Response().Header().Set(SessionHeader, conv.sess.ID)
	}
	gen, release, err := s.router.Acquire(ctx, conv.version)
	if err != nil {
		return fmt.Errorf("engine of %s: %w", conv.version, err)
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()

	defaultCard := s.cfg.Personas[s.cfg.DefaultNPC].Card
	id := "chatcmpl-" + uuid.Must(uuid.NewV7()).String()
	created := s.now().Unix()
	model := s.cfg.Deployment + "/" + conv.version
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
		gr := s.request(nil, gen.Chat())
		if t := req.Temperature; t != nil {
			gr.Temperature = float32(*t)
		}
		if tp := req.TopP; tp != nil {
			gr.TopP = float32(*tp)
		}
		if sd := req.Seed; sd != nil {
			gr.Seed = uint64(*sd) ^ openAISeedSalt
		}
		if n := req.MaxTokens; n != nil {
			gr.MaxTokens = min(*n, gen.MaxSeq()/2)
		}
		if n := req.MaxCompletionTokens; n != nil {
			gr.MaxTokens = min(*n, gen.MaxSeq()/2)
		}
		if gr.Prompt, err = openAIPrompt(gen.Chat(), defaultCard, req.Messages, gen.MaxSeq(), gr.MaxTokens); err != nil {
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
		s.log.Info("safety guard", "route", "chat_completions", "rule", verdict.Rule)
	}
	if finish == "" || finish == "cancelled" {
		finish = "stop"
	}
	if conv.sess != nil {
		x := schema.Exchange{Turn: conv.sess.Turns + 1, User: last, NPC: text, Safety: verdict.Safety}
		if err := s.logChatTurn(ctx, conv, x, out.Completion, time.Since(start)); err != nil {
			return sse.fail(s, err)
		}
	}
	u := schema.ChatUsage{PromptTokens: out.Completion.PromptTokens, CompletionTokens: out.Completion.CompletionTokens}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if req.Stream {
		if err := sse.send("", chunk(schema.ChatDelta{}, &finish)); err != nil {
			return fmt.Errorf("%w: %w", errClientCancelled, err)
		}
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			usage := schema.ChatCompletionChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model,
				Choices: []schema.ChatChunkChoice{}, Usage: &u}
			if err := sse.send("", usage); err != nil {
				return fmt.Errorf("%w: %w", errClientCancelled, err)
			}
		}
		if err := sse.send("", "[DONE]"); err != nil {
			return fmt.Errorf("%w: %w", errClientCancelled, err)
		}
		return nil
	}
	return c.JSON(http.StatusOK, schema.ChatCompletionResponse{
		ID: id, Object: "chat.completion", Created: created, Model: model, Usage: u,
		Choices: []schema.ChatChoice{{Message: schema.ChatMessage{Role: "assistant", Content: text}, FinishReason: finish}},
	})
}

// chatConversation is where a chat completion is logged.
type chatConversation struct {
	version string // the policy version that answers
	// sess is the logged session, nil when the completion is not logged.
	sess *session
	// lock is the turn lock of a stored session (X-Parley-Session); nil for
	// a one-exchange session, which lives only in its events.
	lock *turnLock
}

// openChat finds or starts the session of a chat completion (see
// chatCompletionsHandler) and takes the request's rate-limit tokens.
func (s *Server) openChat(ctx context.Context, clientID, sessionID, user string) (*chatConversation, error) {
	if sessionID == "" {
		if err := s.limit(ctx, clientID, user); err != nil {
			return nil, err
		}
		asg, err := s.router.Assign(ctx, user)
		if err != nil {
			return nil, fmt.Errorf("assign policy: %w", err)
		}
		conv := &chatConversation{version: asg.PolicyVersion}
		if user != "" {
			conv.sess = s.newChatSession(uuid.Must(uuid.NewV7()).String(), clientID, user, asg)
		}
		return conv, nil
	}
	if _, err := uuid.Parse(sessionID); err != nil {
		return nil, fmt.Errorf("%w: %s %q is not a UUID", ErrBadRequest, SessionHeader, sessionID)
	}
	sess, lock, err := s.lockSession(ctx, sessionID, clientID)
	if errors.Is(err, ErrNotFound) {
		return s.startChatSession(ctx, sessionID, clientID, user)
	}
	if err != nil {
		return nil, err
	}
	if user != "" && user != sess.PlayerID {
		lock.unlock(ctx)
		return nil, fmt.Errorf("%w: user %q is not the player of session %s", ErrBadRequest, user, sess.ID)
	}
	if err := s.limitTurn(ctx, sess, lock != nil); err != nil {
		lock.unlock(ctx)
		return nil, err
	}
	if lock == nil {
		return nil, ErrTurnInProgress
	}
	return &chatConversation{version: sess.PolicyVersion, sess: sess, lock: lock}, nil
}

// startChatSession starts session id, named by the client, for player user
// and holds its turn lock: the lock, taken before the session exists, keeps
// two first requests with the same id from both starting it.
func (s *Server) startChatSession(ctx context.Context, id, clientID, user string) (*chatConversation, error) {
	if user == "" {
		return nil, fmt.Errorf("%w: a new %s needs the field user, the player", ErrBadRequest, SessionHeader)
	}
	if err := s.limit(ctx, clientID, user); err != nil {
		return nil, err
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	lock := &turnLock{s: s, id: id, token: hex.EncodeToString(b)}
	ok, err := s.rdb.SetNX(ctx, s.lockKey(id), lock.token, s.cfg.RequestTimeout+10*time.Second).Result()
	if err != nil {
		return nil, fmt.Errorf("lock session %s: %w", id, err)
	}
	if !ok {
		return nil, ErrTurnInProgress
	}
	lock.held = true
	fail := func(err error) (*chatConversation, error) {
		lock.unlock(ctx)
		return nil, err
	}
	if n, err := s.rdb.Exists(ctx, s.sessionKey(id)).Result(); err != nil {
		return fail(fmt.Errorf("start session %s: %w", id, err))
	} else if n > 0 {
		// Another request started it between lockSession and the lock.
		return fail(ErrTurnInProgress)
	}
	asg, err := s.router.Assign(ctx, user)
	if err != nil {
		return fail(fmt.Errorf("assign policy: %w", err))
	}
	sess := s.newChatSession(id, clientID, user, asg)
	if err := s.startSession(ctx, sess); err != nil {
		return fail(err)
	}
	return &chatConversation{version: sess.PolicyVersion, sess: sess, lock: lock}, nil
}

// newChatSession is a session of the default NPC that asg pins.
func (s *Server) newChatSession(id, clientID, user string, asg Assignment) *session {
	return &session{
		ID: id, ClientID: clientID, PlayerID: user, NPCID: s.cfg.DefaultNPC,
		PolicyVersion: asg.PolicyVersion, Arm: asg.Arm, ExperimentID: asg.ExperimentID,
		Salt: asg.Salt, Generation: asg.Generation,
	}
}

// logChatTurn logs exchange x: as the next turn of a stored session, or as
// the whole of a one-exchange session.
func (s *Server) logChatTurn(ctx context.Context, conv *chatConversation, x schema.Exchange, comp Completion, latency time.Duration) error {
	record := context.WithoutCancel(ctx)
	sess := conv.sess
	if conv.lock == nil {
		if err := s.publish(record, s.newEvent(sess, schema.SessionStarted)); err != nil {
			return err
		}
		s.metrics.started.Add(ctx, 1)
	}
	if err := s.publishTurn(record, sess, x, comp, latency); err != nil {
		return err
	}
	s.metrics.turn(ctx, x.Safety)
	if conv.lock == nil || x.Turn >= s.cfg.MaxTurns {
		if err := s.publishMaxTurnsEnd(record, sess, x.Turn); err != nil {
			return err
		}
		s.metrics.sessionsEnded(ctx, schema.EndMaxTurns)
	}
	if conv.lock == nil {
		return nil
	}
	_, err := s.appendTurn(record, sess, conv.lock, x)
	return err
}
