package learner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// Config configures the learner process (`parley learner`).
type Config struct {
	// DataDir holds the session store (DataDir/sessions), training runs
	// (DataDir/runs) and the refresh state.
	DataDir string `json:"data_dir"`
	// Registry is the model registry root the refreshed user agent is
	// published to.
	Registry string `json:"registry"`
	// SegmentBytes is the size of a session store segment; 0 means
	// DefaultSegmentBytes.
	SegmentBytes int64          `json:"segment_bytes"`
	Consumer     ConsumerConfig `json:"consumer"`
	// Refresh configures the user-agent refresh; RefreshEnabled turns it on.
	Refresh        RefreshConfig `json:"refresh"`
	RefreshEnabled bool          `json:"refresh_enabled"`
}

// DefaultConfig returns the defaults of every part; DataDir, Registry and
// Consumer.Brokers must still be set.
func DefaultConfig() Config {
	return Config{Consumer: DefaultConsumerConfig(), Refresh: DefaultRefreshConfig(), RefreshEnabled: true}
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("learner config: data dir is required")
	}
	if err := c.Consumer.Validate(); err != nil {
		return fmt.Errorf("learner config: %w", err)
	}
	if c.RefreshEnabled {
		if c.Registry == "" {
			return errors.New("learner config: the refresh needs a registry")
		}
		if err := c.Refresh.Validate(); err != nil {
			return fmt.Errorf("learner config: %w", err)
		}
	}
	return nil
}

// Deps are the learner's injected dependencies.
type Deps struct {
	Logger *slog.Logger
	// Now is the wall clock; nil means time.Now.
	Now func() time.Time
}

// Learner runs the session consumer and the user-agent refresh loop.
type Learner struct {
	cfg       Config
	logger    *slog.Logger
	store     *Store
	consumer  *Consumer
	refresher *refresher
}

// New opens the session store and prepares the consumer and the refresh.
func New(cfg Config, deps Deps) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := deps.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	now := deps.Now
	if now == nil {
		now = time.Now
	}
	store, err := OpenStore(filepath.Join(cfg.DataDir, "sessions"), cfg.SegmentBytes, logger)
	if err != nil {
		return nil, fmt.Errorf("new learner: %w", err)
	}
	c, err := NewConsumer(cfg.Consumer, store, logger, now)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("new learner: %w", err)
	}
	l := &Learner{cfg: cfg, logger: logger, store: store, consumer: c}
	if cfg.RefreshEnabled {
		l.refresher = &refresher{cfg: cfg.Refresh, store: store, registry: cfg.Registry, dataDir: cfg.DataDir, logger: logger, now: now}
		if err := l.refresher.load(); err != nil {
			store.Close()
			return nil, fmt.Errorf("new learner: %w", err)
		}
	}
	return l, nil
}

// Store returns the session store.
func (l *Learner) Store() *Store { return l.store }

// RefereeGate returns the refresh's referee gate, for the AT-GRPO cycle to
// judge the user agent it would train against by the same rule; nil when
// the referee is off (no ground-truth population).
func (l *Learner) RefereeGate() *RefereeGate {
	return newRefereeGate(l.cfg.Refresh, l.cfg.Registry, l.logger)
}

// ConsumerStats returns the consumer's counters.
func (l *Learner) ConsumerStats() ConsumerStats { return l.consumer.Stats() }

// Run consumes sessions and refreshes the user agent until ctx is done,
// then closes the store. It returns the first error of either part.
func (l *Learner) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() {
		if errs[0] = l.consumer.Run(ctx); errs[0] != nil {
			cancel()
		}
	})
	if l.refresher != nil {
		wg.Go(func() {
			if errs[1] = l.refresher.run(ctx); errs[1] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errors.Join(errs...), l.store.Close())
}

// RefreshNow runs one user-agent refresh on the sessions stored since the
// last one, whether or not it is due. It returns nil and no error when
// there are too few players to hold some out.
func (l *Learner) RefreshNow(ctx context.Context) (*SFTResult, error) {
	if l.refresher == nil {
		return nil, errors.New("refresh: disabled")
	}
	return l.refresher.refresh(ctx)
}

// EvalOptions says how `parley eval` evaluates a model: on the held-out
// players of a corpus under the same split as training.
type EvalOptions struct {
	Role         Role                      `json:"role"`
	HeldOutShare float64                   `json:"held_out_share"`
	Seed         uint64                    `json:"seed"`
	MaxTurns     int                       `json:"max_turns"`
	Eval         EvalConfig                `json:"eval"`
	UserAgent    simulator.UserAgentConfig `json:"user_agent"`
	NPCCards     map[string]string         `json:"npc_cards,omitempty"`
	DefaultCard  string                    `json:"default_card"`
	Backend      inference.BackendConfig   `json:"backend"`
}

// EvalOptionsFrom takes the evaluation settings of an SFT configuration,
// so that a model is evaluated on the players it was not trained on.
func EvalOptionsFrom(c SFTConfig) EvalOptions {
	return EvalOptions{Role: c.Role, HeldOutShare: c.HeldOutShare, Seed: c.Seed, MaxTurns: c.MaxTurns, Eval: c.Eval,
		UserAgent: c.UserAgent, NPCCards: c.NPCCards, DefaultCard: c.DefaultCard, Backend: c.Backend}
}

// EvaluateModel loads the registry version in dir (checksums verified) and
// measures it as opts.Role on the held-out players of dialogues, prompted
// in its chat format (an imported model's template); a user agent with the
// calibration its version carries, as it is served.
func EvaluateModel(ctx context.Context, dir string, dialogues []schema.Dialogue, opts EvalOptions, logger *slog.Logger) (Metrics, error) {
	if err := opts.Role.Validate(); err != nil {
		return Metrics{}, err
	}
	if err := opts.Eval.Validate(); err != nil {
		return Metrics{}, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, chat, man, err := loadChatModel(dir, opts.Backend)
	if err != nil {
		return Metrics{}, err
	}
	train, heldOut := splitPlayers(dialogues, opts.HeldOutShare, opts.Seed)
	if len(heldOut) == 0 {
		return Metrics{}, fmt.Errorf("evaluate %q: no held-out players: %w", dir, errNoData)
	}
	ua, err := opts.UserAgent.ForVersion(dir, man)
	if err != nil {
		return Metrics{}, err
	}
	ev := evaluator{role: opts.Role, cfg: opts.Eval, ua: ua,
		prompt: npcPrompt{cards: opts.NPCCards, defaultCard: opts.DefaultCard, chat: chat},
		risks:  simulator.TrainingRisks(train, opts.MaxTurns), logger: logger}
	return ev.evaluate(ctx, m, chat.Tokenizer(), heldOut, byPlayer(heldOut))
}
