package learner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// matchLength shifts the fitted calibration cal of the refreshed user
// agent m so that its players last as long as the logged ones did. The
// calibration is fitted on the players' own messages, while in a
// simulated dialogue the user agent writes them, and its players then
// stay longer or leave sooner than the logged players: the referee's
// simulated/real Avg.L. So the NPC version that served most of the
// held-out players' sessions plays their openings against the agent as
// calibrated, and rl.MatchLength finds the offset under which those
// dialogues last, up to LengthMatch.Depth exchanges (or the deployment's
// turn limit, when a session shows it lower), as long as the same sessions
// did. Only what a deployment logs goes in: the openings, the
// players' earlier sessions as style demos, and the sessions' lengths.
// It says what it did, or why it left the offset as fitted.
func (r *refresher) matchLength(ctx context.Context, m *inference.Model, tok *inference.Tokenizer, cal *refreshCalibration, window []schema.Dialogue) (string, error) {
	lm, sft := r.cfg.LengthMatch, r.cfg.SFT
	if lm.Dialogues == 0 || !cal.Fitted {
		return "", nil
	}
	began := time.Now()
	train, heldOut := splitPlayers(window, sft.HeldOutShare, sft.Seed)
	version, sessions := servedMost(heldOut)
	if len(sessions) == 0 {
		return "no length match: no held-out session with an opening and a length the player decided", nil
	}
	dir := filepath.Join(r.registry, r.cfg.NPC.Model, version)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Sprintf("no length match: %s %s, which served the sessions, is not in the registry", r.cfg.NPC.Model, version), nil
	}
	sessions = sessions[:min(len(sessions), lm.Dialogues)]
	depth := lm.Depth
	for _, d := range sessions {
		if d.Reason == schema.EndMaxTurns {
			depth = min(depth, len(d.Exchanges)) // the deployment's turn limit
		}
	}
	risks := simulator.TrainingRisks(train, sft.MaxTurns)
	demos := byPlayer(heldOut)
	prompts := make([]rl.Prompt, len(sessions))
	lengths := make([]int, len(sessions))
	for i, d := range sessions {
		prompts[i] = rl.Prompt{ID: d.SessionID, PlayerID: d.PlayerID, System: r.cfg.NPC.DefaultCard, Greeting: r.cfg.NPC.DefaultGreeting,
			Opening: d.Exchanges[0].User, Demos: promptDemos(pickDemos(demos[d.PlayerID], d), risks), Seed: sft.Seed*1_000_003 + uint64(i)}
		lengths[i] = len(d.Exchanges)
	}

	nm, chat, _, err := loadChatModel(dir, sft.Backend)
	if err != nil {
		return "", fmt.Errorf("length match: %w", err)
	}
	eng, stopNPC, err := cycleEngine(nm, chat, r.logger)
	if err != nil {
		return "", fmt.Errorf("length match: %w", err)
	}
	defer stopNPC()
	pol, err := rl.NewChatPolicy(eng, chat, nm.Config().MaxSeq, r.cfg.NPC.Policy)
	if err != nil {
		return "", fmt.Errorf("length match: %w", err)
	}
	ua, stopUA, err := userAgentOn(m, tok, cal.userAgent(r.cfg.NPC.UserAgent), r.logger)
	if err != nil {
		return "", fmt.Errorf("length match: %w", err)
	}
	defer stopUA()
	match, err := rl.MatchSessions(ctx, pol, rl.NewUserAgentEnv(ua, sft.Seed*7919+5), prompts, lengths, depth)
	r.logger.Info("user-agent length match", "npc", version, "values", match.Summary(), "error", err, "seconds", time.Since(began).Seconds())
	if errors.Is(err, rl.ErrLengthOutOfReach) {
		return "offset kept: " + err.Error(), nil
	}
	if err != nil {
		return "", fmt.Errorf("length match: %w", err)
	}
	cal.Offset += match.Shift
	cal.LengthShift = match.Shift
	return fmt.Sprintf("length matched on %s %s's %s", r.cfg.NPC.Model, version, match.Summary()), nil
}

// servedMost returns the policy version that served most of the sessions
// whose length the player decided (or the turn limit cut) and that open
// with a player's message (the first to get there on a tie), and those
// sessions of it, in order.
func servedMost(ds []schema.Dialogue) (string, []schema.Dialogue) {
	byVersion := map[string][]schema.Dialogue{}
	best := ""
	for _, d := range ds {
		if len(d.Exchanges) == 0 || d.Exchanges[0].User == "" || !d.Reason.PlayerEnded() && d.Reason != schema.EndMaxTurns {
			continue
		}
		v := d.PolicyVersion
		byVersion[v] = append(byVersion[v], d)
		if len(byVersion[v]) > len(byVersion[best]) {
			best = v
		}
	}
	return best, byVersion[best]
}
