package experiment

import (
	"context"
	"errors"
	"fmt"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/learner"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// calibrate fits ua's logit calibration (simulator.FitCalibration) on
// sessions that the policy in npcDir plays with the training personas,
// read as a deployment logs them: what the players said and who quit after
// which NPC turn, never their hidden hazard. The calibration reads turns
// through word topics learned, as the learner's refresh learns them, from
// the training players' messages in the corpus, and the players' and the
// NPC's words through a tone and a wording cross-fitted on the
// Profile.CalibrationSessions sessions split in two halves by player
// (simulator.UserAgent.CrossFitDecisions); the agent then reads the tone
// and wording learned on all of them. Then, as the refresh does, it
// matches the length (rl.MatchSessions): the offset moves so that the
// policy's dialogues with the calibrated agent, from the openings of the
// sessions it was fitted on, last as long as those sessions did. It
// returns ua as it is when the profile asks for no calibration.
func (e *env) calibrate(ctx context.Context, npcDir string, ua *simulator.UserAgent) (*simulator.UserAgent, error) {
	n := e.prof.CalibrationSessions
	if n == 0 {
		return ua, nil
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
	if e.topics == nil {
		player, npc := simulator.DialogueMessages(e.corpus.train)
		if e.topics, err = simulator.LearnWordTopics(player, npc, simulator.DefaultWordTopicsConfig()); err != nil {
			return nil, fmt.Errorf("calibrate user agent: %w", err)
		}
	}
	demos := map[string][]simulator.PromptDialogue{}
	for _, p := range prompts {
		demos[p.PlayerID] = p.Demos
	}
	a, b := halves(logged)
	minMessages := simulator.DefaultWordTopicsConfig().MinMessages
	topical, err := ua.WithWordTopics(e.topics)
	if err != nil {
		return nil, fmt.Errorf("calibrate user agent: %w", err)
	}
	ds, err := topical.CrossFitDecisions(ctx, a, b, minMessages, func(d schema.Dialogue) []simulator.PromptDialogue { return demos[d.PlayerID] }, e.corpus.risks)
	if err != nil {
		return nil, fmt.Errorf("calibrate user agent: %w", err)
	}
	c, err := simulator.FitCalibration(ds)
	if err != nil {
		return nil, fmt.Errorf("calibrate user agent: %w", err)
	}
	topics := *e.topics
	if topics.Tone, err = simulator.LearnTone(logged, minMessages); err != nil {
		return nil, fmt.Errorf("calibrate user agent: %w", err)
	}
	if topics.Wording, err = simulator.LearnWording(logged, minMessages); err != nil {
		return nil, fmt.Errorf("calibrate user agent: %w", err)
	}
	if ua, err = ua.WithWordTopics(&topics); err != nil {
		return nil, fmt.Errorf("calibrate user agent: %w", err)
	}
	if ua, err = ua.WithCalibration(c); err != nil {
		return nil, fmt.Errorf("calibrate user agent: %w", err)
	}
	// The refresh's length match: the policy plays the openings of the
	// sessions the calibration was fitted on against the calibrated agent,
	// and the offset moves so that they last as long as the sessions did.
	byID := make(map[string]rl.Prompt, len(prompts))
	for _, p := range prompts {
		byID[p.ID] = p
	}
	fit := b[:min(len(b), learner.DefaultRefreshConfig().LengthMatch.Dialogues)]
	openings, lengths := make([]rl.Prompt, len(fit)), make([]int, len(fit))
	for i, d := range fit {
		openings[i], lengths[i] = byID[d.SessionID], len(d.Exchanges)
	}
	match, err := rl.MatchSessions(ctx, pol, rl.NewUserAgentEnv(ua, e.prof.Referee.Seed*7919+5), openings, lengths, e.prof.Referee.Depth)
	if err != nil && !errors.Is(err, rl.ErrLengthOutOfReach) {
		return nil, fmt.Errorf("calibrate user agent: %w", err)
	}
	c.Offset += match.Shift
	e.logger.Info("user agent calibration", "values", c.Summary(), "topic_words", len(e.topics.Words),
		"decisions", len(ds), "sessions", len(logged), "length_match", match.Summary(), "length_match_error", err)
	return ua.WithCalibration(c)
}

// halves splits sessions by player, alternating in the order the players
// first appear.
func halves(sessions []schema.Dialogue) (a, b []schema.Dialogue) {
	order := map[string]int{}
	for _, d := range sessions {
		if _, ok := order[d.PlayerID]; !ok {
			order[d.PlayerID] = len(order)
		}
		if order[d.PlayerID]%2 == 0 {
			a = append(a, d)
		} else {
			b = append(b, d)
		}
	}
	return a, b
}
