package gateway

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
)

// POST /v1/sessions
func (s *Server) createSessionHandler(c echo.Context) error {
	ctx := c.Request().Context()
	p := principalOf(c)
	body, err := readBody(c.Request().Body, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	var req schema.CreateSessionRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if req.NPCID == "" {
		req.NPCID = s.cfg.DefaultNPC
	}
	persona, ok := s.cfg.Personas[req.NPCID]
	if !ok {
		return fmt.Errorf("%w: npc_id %q is not one of this deployment's NPCs", ErrBadRequest, req.NPCID)
	}
	if err := s.limit(ctx, p.ClientID, req.PlayerID); err != nil {
		return err
	}
	asg, err := s.router.Assign(ctx, req.PlayerID)
	if err != nil {
		return fmt.Errorf("assign policy: %w", err)
	}
	sess := &session{
		ID: uuid.Must(uuid.NewV7()).String(), ClientID: p.ClientID, PlayerID: req.PlayerID, NPCID: req.NPCID,
		PolicyVersion: asg.PolicyVersion, Arm: asg.Arm, ExperimentID: asg.ExperimentID, Client: req.Client,
		Salt: asg.Salt, Generation: asg.Generation,
	}
	if err := s.startSession(ctx, sess); err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, schema.CreateSessionResponse{
		SessionID: sess.ID, Greeting: persona.Greeting, PolicyVersion: sess.PolicyVersion, Arm: sess.Arm,
	})
}

// startSession stores sess and logs its session_started.
func (s *Server) startSession(ctx context.Context, sess *session) error {
	if err := s.createSession(ctx, sess); err != nil {
		return err
	}
	ev := s.newEvent(sess, schema.SessionStarted)
	ev.Client = sess.Client
	if err := s.publish(ctx, ev); err != nil {
		// The session never started for the player: forget it.
		ctx := context.WithoutCancel(ctx)
		s.rdb.ZRem(ctx, s.activeKey(), sess.ID)
		s.rdb.Del(ctx, s.sessionKey(sess.ID))
		return err
	}
	s.metrics.started.Add(ctx, 1)
	return nil
}

// ownedSession loads the session named in the path, checking that the
// caller created it.
func (s *Server) ownedSession(c echo.Context) (*session, error) {
	sess, err := s.loadSession(c.Request().Context(), c.Param("id"))
	if err != nil {
		return nil, err
	}
	if sess.ClientID != principalOf(c).ClientID {
		return nil, fmt.Errorf("%w: session %s belongs to another client", ErrForbidden, sess.ID)
	}
	return sess, nil
}

// POST /v1/sessions/{id}/messages
func (s *Server) messageHandler(c echo.Context) error {
	start := time.Now()
	body, err := readBody(c.Request().Body, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	msg, err := parseMessage(body, s.cfg.MaxMessageBytes)
	if err != nil {
		return err
	}
	// Three Redis round trips on the common path: load and lock, rate
	// limit and activity, append and unlock (the API key is cached).
	ctx := c.Request().Context()
	sess, lock, err := s.lockSession(ctx, c.Param("id"), principalOf(c).ClientID)
	if err != nil {
		return err
	}
	defer lock.unlock(ctx)
	if err := s.limitTurn(ctx, sess, lock != nil); err != nil {
		return err
	}
	if lock == nil {
		return ErrTurnInProgress
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()

	persona, ok := s.cfg.Personas[sess.NPCID]
	if !ok {
		persona = s.cfg.Personas[s.cfg.DefaultNPC]
	}
	sse := &sseWriter{c: c}
	var onPiece func(string) error
	if wantsSSE(c) {
		onPiece = func(piece string) error { return sse.send("token", tokenEvent{Text: piece}) }
	}

	verdict := s.guard.CheckInput(msg.Text)
	var out generated
	if verdict.Safety == schema.SafetyNone {
		gen, release, err := s.router.Acquire(ctx, sess.PolicyVersion)
		if err != nil {
			return fmt.Errorf("engine of %s: %w", sess.PolicyVersion, err)
		}
		defer release()
		chat := gen.Chat()
		prompt, err := npcPrompt(chat, persona, sess.History, msg.Text, gen.MaxSeq(), min(s.cfg.Sampling.MaxTokens, gen.MaxSeq()/2))
		if err != nil {
			return err
		}
		// While the request waits in the engine queue, a stream gets keep-alive comments.
		stopKeepAlive := func() {}
		pieces := onPiece
		if onPiece != nil {
			stopKeepAlive = keepAlive(sse, s.cfg.SSEKeepAlive)
			pieces = func(piece string) error { stopKeepAlive(); return onPiece(piece) }
		}
		out, err = s.generate(ctx, gen, s.request(prompt, chat), pieces)
		stopKeepAlive()
		if err != nil {
			return sse.fail(s, err)
		}
		verdict = s.guard.CheckOutput(out.Text, persona.Card)
	} else if onPiece != nil {
		if err := onPiece(verdict.Reply); err != nil {
			return fmt.Errorf("%w: %w", errClientCancelled, err)
		}
	}
	reply := out.Text
	if verdict.Safety != schema.SafetyNone {
		reply = verdict.Reply
		s.log.Info("safety guard", "session_id", sess.ID, "rule", verdict.Rule)
	}

	// The reply is complete (and may have been streamed): record it even if
	// the client goes away now. Its events are made durable first and the
	// session is updated after, so a crash or a failed spool between the two
	// can at worst log a turn the transcript lacks (the retry logs the same
	// turn number again, and consumers keep the latest), never keep a turn
	// whose event is lost.
	record := context.WithoutCancel(ctx)
	x := schema.Exchange{Turn: sess.Turns + 1, User: msg.Text, NPC: reply, Safety: verdict.Safety}
	if err := s.publishTurn(record, sess, x, out.Completion, time.Since(start)); err != nil {
		return sse.fail(s, err)
	}
	if x.Turn >= s.cfg.MaxTurns {
		if err := s.publishMaxTurnsEnd(record, sess, x.Turn); err != nil {
			return sse.fail(s, err)
		}
	}
	ended, err := s.appendTurn(record, sess, lock, x)
	if err != nil {
		return sse.fail(s, err)
	}
	s.metrics.turn(ctx, x.Safety)
	resp := schema.MessageResponse{Reply: reply, Turn: x.Turn, Safety: x.Safety}
	if ended {
		resp.Ended = schema.EndMaxTurns
		s.metrics.sessionsEnded(ctx, schema.EndMaxTurns)
	}
	if onPiece != nil {
		if err := sse.send("done", resp); err != nil {
			return fmt.Errorf("%w: %w", errClientCancelled, err)
		}
		return nil
	}
	return respondMessage(c, resp)
}

// tokenEvent is the data of an SSE "token" event.
type tokenEvent struct {
	Text string `json:"text"`
}

// request builds the generation request of an NPC reply from the configured sampling.
func (s *Server) request(prompt []int, chat *inference.ChatFormat) GenerateRequest {
	sp := s.cfg.Sampling
	return GenerateRequest{
		Prompt: prompt, MaxTokens: sp.MaxTokens, Temperature: sp.Temperature, TopK: sp.TopK, TopP: sp.TopP,
		Seed: sp.Seed, Stop: stopIDs(chat),
	}
}

// POST /v1/sessions/{id}/end, with an optional schema.EndSessionRequest.
func (s *Server) endSessionHandler(c echo.Context) error {
	sess, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	body, err := readBody(c.Request().Body, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	reason, err := parseEndReason(body)
	if err != nil {
		return err
	}
	if sess.Ended != "" {
		return fmt.Errorf("session %s ended (%s): %w", sess.ID, sess.Ended, ErrSessionEnded)
	}
	ctx := c.Request().Context()
	ended, err := s.endSession(ctx, sess.ID, reason, "+inf")
	if err != nil {
		return err
	}
	if ended == nil {
		return fmt.Errorf("session %s: %w", sess.ID, ErrSessionEnded)
	}
	if err := s.publish(ctx, s.endedEvent(ended, reason)); err != nil {
		return err
	}
	s.metrics.sessionsEnded(ctx, reason)
	return c.JSON(http.StatusOK, view(ended))
}

// GET /v1/sessions/{id}
func (s *Server) getSessionHandler(c echo.Context) error {
	sess, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, view(sess))
}

func view(sess *session) schema.SessionView {
	t := sess.History
	if t == nil {
		t = []schema.Exchange{}
	}
	return schema.SessionView{
		SessionID: sess.ID, PlayerID: sess.PlayerID, NPCID: sess.NPCID, PolicyVersion: sess.PolicyVersion,
		Arm: sess.Arm, Turns: sess.Turns, Ended: sess.Ended, Transcript: t,
	}
}
