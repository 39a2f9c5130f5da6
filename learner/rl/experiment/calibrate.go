package experiment

import (
	"context"
	"fmt"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// calibrate fits ua's logit calibration (simulator.FitCalibration) on
// Profile.CalibrationSessions sessions that the policy in npcDir plays with
// the training personas, read as a deployment logs them: who quit after
// which NPC turn, never the players' hidden hazard. The calibration reads
// turns through word topics learned, as the learner's refresh learns them,
// from the training players' messages in the corpus. It returns ua as it
// is when the profile asks for no calibration.
func (e *env) calibrate(ctx context.Context, npcDir string, ua *simulator.UserAgent) (*simulator.UserAgent, error) {
	n := e.prof.CalibrationSessions
	if n == 0 {
		return ua, nil
	}
	if e.topics == nil {
		player, npc := simulator.DialogueMessages(e.corpus.train)
		topics, err := simulator.LearnWordTopics(player, npc, simulator.DefaultWordTopicsConfig())
		if err != nil {
			return nil, fmt.Errorf("calibrate user agent: %w", err)
		}
		e.topics = topics
	}
	ua, err := ua.WithWordTopics(e.topics)
	if err != nil {
		return nil, fmt.Errorf("calibrate user agent: %w", err)
	}
	model, _, _, err := inference.LoadCheckpoint(npcDir, inference.DefaultBackendConfig())
	if err != nil {
		return nil, fmt.Errorf("calibrate user agent: %w", err)
	}
	eng, stop, err := startEngine(model, e.tok, e.logger)
	if err != nil {
		return nil, fmt.Errorf("calibrate user agent: %w", err)
	}
	defer stop()
	pc := e.prof.Policy
	pc.Seed = e.prof.Referee.Seed*31337 + 29
	pol, err := rl.NewModelPolicy(eng, e.tok, model.Config().MaxSeq, pc)
	if err != nil {
		return nil, fmt.Errorf("calibrate user agent: %w", err)
	}
	prompts := e.corpus.prompts(false, n, 8_000_000, Card)
	logged, err := rl.PlaySessions(ctx, pol, e.players, prompts, e.prof.MaxTurns)
	if err != nil {
		return nil, fmt.Errorf("calibrate user agent: %w", err)
	}
	demos := map[string][]simulator.PromptDialogue{}
	for _, p := range prompts {
		demos[p.PlayerID] = p.Demos
	}
	c, decisions, err := ua.FitCalibrationOn(ctx, logged, func(d schema.Dialogue) []simulator.PromptDialogue { return demos[d.PlayerID] }, e.corpus.risks)
	if err != nil {
		return nil, fmt.Errorf("calibrate user agent: %w", err)
	}
	e.logger.Info("user agent calibration", "values", c.Summary(), "topic_words", len(e.topics.Words), "decisions", decisions, "sessions", len(logged))
	return ua.WithCalibration(c)
}
