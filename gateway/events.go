package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/schema"
)

// newEvent fills the common fields of an event of sess.
func (s *Server) newEvent(sess *session, typ schema.EventType) schema.SessionEvent {
	return schema.SessionEvent{
		Schema:        schema.SessionEventSchema,
		EventID:       uuid.Must(uuid.NewV7()).String(),
		Type:          typ,
		SessionID:     sess.ID,
		PlayerID:      sess.PlayerID,
		NPCID:         sess.NPCID,
		Deployment:    s.cfg.Deployment,
		PolicyVersion: sess.PolicyVersion,
		ExperimentID:  sess.ExperimentID,
		Arm:           sess.Arm,
		Salt:          sess.Salt,
		Generation:    sess.Generation,
		TS:            s.now().UTC(),
	}
}

func (s *Server) endedEvent(sess *session, reason schema.EndReason) schema.SessionEvent {
	ev := s.newEvent(sess, schema.SessionEnded)
	ev.Turns, ev.Reason = sess.Turns, reason
	return ev
}

// publish hands ev to the event sink. It goes on when the client has gone
// away: an exchange that happened is logged.
func (s *Server) publish(ctx context.Context, ev schema.SessionEvent) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := s.events.Publish(ctx, ev); err != nil {
		s.metrics.publishErrors.Add(ctx, 1)
		return fmt.Errorf("%w: %s %s of session %s: %w", ErrEventsUnlogged, ev.Type, ev.EventID, ev.SessionID, err)
	}
	return nil
}

// publishTurn publishes exchange x of sess, which took latency and comp's
// tokens, as a turn event.
func (s *Server) publishTurn(ctx context.Context, sess *session, x schema.Exchange, comp Completion, latency time.Duration) error {
	ev := s.newEvent(sess, schema.TurnEvent)
	ev.Turn, ev.UserText, ev.NPCText, ev.Safety = x.Turn, x.User, x.NPC, x.Safety
	ev.LatencyMS = latency.Milliseconds()
	ev.TokensIn, ev.TokensOut = comp.PromptTokens, comp.CompletionTokens
	return s.publish(ctx, ev)
}

// publishMaxTurnsEnd publishes the end of sess at its max turns, after turn.
func (s *Server) publishMaxTurnsEnd(ctx context.Context, sess *session, turn int) error {
	end := s.endedEvent(sess, schema.EndMaxTurns)
	end.Turns = turn
	return s.publish(ctx, end)
}
