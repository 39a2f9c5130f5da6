package simulator

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/parleyhq/parley/schema"
)

// QualityWeight is the share of bootstrap dialogues played by one quality
// of scripted NPC.
type QualityWeight struct {
	Quality NPCQuality `json:"quality"`
	Weight  float64    `json:"weight"`
}

// CorpusConfig configures the bootstrap corpus: the population talks to a
// scripted NPC of mixed quality.
type CorpusConfig struct {
	Players            int    `json:"players"`              // population size
	DialoguesPerPlayer int    `json:"dialogues_per_player"` // sessions per persona
	Seed               uint64 `json:"seed"`
	MaxTurns           int    `json:"max_turns"` // exchanges before the session ends with max_turns
	// IncludeHeldOut also plays the personas flagged HeldOut.
	IncludeHeldOut bool            `json:"include_held_out"`
	Qualities      []QualityWeight `json:"qualities"`
	NPCIDs         []string        `json:"npc_ids"`
	Deployment     string          `json:"deployment"`
	PolicyVersion  string          `json:"policy_version"`
	// Epoch is the start of the first session; sessions start SessionGap apart
	// and exchanges take TurnGap each.
	Epoch      time.Time     `json:"epoch"`
	SessionGap time.Duration `json:"session_gap"`
	TurnGap    time.Duration `json:"turn_gap"`
	// Population draws the players; its Size is replaced by Players.
	Population PopulationConfig `json:"population"`
	Script     ScriptConfig     `json:"script"`
}

// DefaultCorpusConfig returns a corpus of 100 players with 5 dialogues each.
func DefaultCorpusConfig() CorpusConfig {
	return CorpusConfig{
		Players: 100, DialoguesPerPlayer: 5, Seed: 1, MaxTurns: 20,
		Qualities: []QualityWeight{
			{NPCGood, 0.4}, {NPCGeneric, 0.2}, {NPCOffTopic, 0.15}, {NPCRetention, 0.15}, {NPCInconsistent, 0.1},
		},
		NPCIDs:        []string{"blacksmith", "innkeeper", "ranger", "bard"},
		Deployment:    "bootstrap",
		PolicyVersion: "scripted",
		Epoch:         time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		SessionGap:    time.Minute,
		TurnGap:       8 * time.Second,
		Population:    DefaultPopulationConfig(),
		Script:        DefaultScriptConfig(),
	}
}

// Validate checks the sizes, weights and ids.
func (c CorpusConfig) Validate() error {
	if c.Players < 1 || c.DialoguesPerPlayer < 1 || c.MaxTurns < 1 {
		return fmt.Errorf("corpus: players %d, dialogues per player %d and max turns %d must be at least 1",
			c.Players, c.DialoguesPerPlayer, c.MaxTurns)
	}
	total := 0.0
	for _, q := range c.Qualities {
		if !slices.Contains(Qualities(), q.Quality) {
			return fmt.Errorf("corpus: unknown npc quality %q", q.Quality)
		}
		if q.Weight < 0 {
			return fmt.Errorf("corpus: quality %q has negative weight", q.Quality)
		}
		total += q.Weight
	}
	if total <= 0 {
		return errors.New("corpus: quality weights sum to zero")
	}
	if len(c.NPCIDs) == 0 || c.Deployment == "" || c.PolicyVersion == "" {
		return errors.New("corpus: npc ids, deployment and policy version are required")
	}
	if c.SessionGap <= 0 || c.TurnGap <= 0 {
		return errors.New("corpus: session and turn gaps must be positive")
	}
	p := c.Population
	p.Size = c.Players
	if err := p.Validate(); err != nil {
		return err
	}
	return c.Script.Validate()
}

// CorpusStats counts what GenerateCorpus wrote.
type CorpusStats struct {
	Players       int                               `json:"players"`
	HeldOut       int                               `json:"held_out"` // personas skipped as held out
	Dialogues     int                               `json:"dialogues"`
	Exchanges     int                               `json:"exchanges"`
	Events        int                               `json:"events"`
	AvgL          float64                           `json:"avg_l"`
	Reasons       map[schema.EndReason]int          `json:"reasons"`
	ByQuality     map[NPCQuality]schema.LengthStats `json:"by_quality"`
	Kinds         map[Kind]int                      `json:"kinds"`
	SafetyCrisis  int                               `json:"safety_crisis"`
	SafetyRefused int                               `json:"safety_refused"`
}

// NPC is anything that answers a player: a ScriptedNPC, or a policy.
type NPC interface {
	Reply(playerText string) (string, schema.Safety)
}

var _ NPC = (*ScriptedNPC)(nil)

// Play lets conv talk to npc until the player leaves, the guard meets a
// self-harm message (reason safety), or maxTurns exchanges pass. The
// dialogue's ids and times are left for the caller to fill in.
func Play(conv *Conversation, npc NPC, maxTurns int) schema.Dialogue {
	var d schema.Dialogue
	user := conv.Opening()
	for turn := 1; ; turn++ {
		reply, safety := npc.Reply(user)
		x := schema.Exchange{Turn: turn, User: user, NPC: reply}
		if safety != schema.SafetyNone {
			x.Safety = safety
		}
		d.Exchanges = append(d.Exchanges, x)
		if safety == schema.SafetyCrisis {
			d.Reason = schema.EndSafety
			return d
		}
		if turn >= maxTurns {
			d.Reason = schema.EndMaxTurns
			return d
		}
		next, end, _ := conv.Respond(reply)
		if end {
			d.Reason = conv.Reason()
			return d
		}
		user = next
	}
}

// GenerateCorpus plays every persona against scripted NPCs and writes the
// dialogues to w as JSON lines, one session event per line, each session's
// events contiguous. The same config gives the same bytes.
func GenerateCorpus(ctx context.Context, cfg CorpusConfig, w io.Writer) (CorpusStats, error) {
	if err := cfg.Validate(); err != nil {
		return CorpusStats{}, err
	}
	pcfg := cfg.Population
	pcfg.Size = cfg.Players
	pop, err := NewPopulation(pcfg, cfg.Seed)
	if err != nil {
		return CorpusStats{}, err
	}
	stats := CorpusStats{
		Reasons: make(map[schema.EndReason]int), ByQuality: make(map[NPCQuality]schema.LengthStats), Kinds: make(map[Kind]int),
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xc0a1e5ce))
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	start := cfg.Epoch
	for _, p := range pop.Players() {
		if p.HeldOut && !cfg.IncludeHeldOut {
			stats.HeldOut++
			continue
		}
		if err := ctx.Err(); err != nil {
			return stats, fmt.Errorf("generate corpus: %w", err)
		}
		stats.Players++
		stats.Kinds[p.Kind]++
		for range cfg.DialoguesPerPlayer {
			q := pickQuality(rng, cfg.Qualities)
			npc, err := NewScriptedNPC(pop, q, cfg.Script, rng.Uint64())
			if err != nil {
				return stats, err
			}
			d := Play(p.Start(rng.Uint64()), npc, cfg.MaxTurns)
			d.SessionID = NewEventID(rng, start)
			d.PlayerID, d.NPCID = p.ID, pick(rng, cfg.NPCIDs)
			d.Deployment, d.PolicyVersion = cfg.Deployment, cfg.PolicyVersion
			d.Started = start
			d.Ended = start.Add(time.Duration(len(d.Exchanges)+1) * cfg.TurnGap)
			start = start.Add(cfg.SessionGap)

			events, err := DialogueEvents(d, rng)
			if err != nil {
				return stats, fmt.Errorf("generate corpus: %w", err)
			}
			for _, e := range events {
				if err := enc.Encode(e); err != nil {
					return stats, fmt.Errorf("generate corpus: write: %w", err)
				}
			}
			stats.Dialogues++
			stats.Events += len(events)
			stats.Exchanges += len(d.Exchanges)
			stats.Reasons[d.Reason]++
			stats.ByQuality[q] = stats.ByQuality[q].Add(len(d.Exchanges))
			for _, x := range d.Exchanges {
				switch x.Safety {
				case schema.SafetyCrisis:
					stats.SafetyCrisis++
				case schema.SafetyRefused:
					stats.SafetyRefused++
				}
			}
		}
	}
	if stats.Dialogues > 0 {
		stats.AvgL = float64(stats.Exchanges) / float64(stats.Dialogues)
	}
	if err := bw.Flush(); err != nil {
		return stats, fmt.Errorf("generate corpus: write: %w", err)
	}
	return stats, nil
}

func pickQuality(rng *rand.Rand, qs []QualityWeight) NPCQuality {
	total := 0.0
	for _, q := range qs {
		total += q.Weight
	}
	r := rng.Float64() * total
	for _, q := range qs {
		if r < q.Weight {
			return q.Quality
		}
		r -= q.Weight
	}
	return qs[len(qs)-1].Quality
}
