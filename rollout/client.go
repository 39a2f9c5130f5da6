package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/parleyhq/parley/schema"
)

// Config configures a Client.
type Config struct {
	// Prefix is put in front of every key and channel, such as "parley:".
	Prefix string
	// PollInterval is how often Watch reads the state in case an
	// announcement was lost (pub/sub is lossy) and while Redis is down.
	PollInterval time.Duration
	// HistoryLen is how many changes the history list of a deployment keeps.
	HistoryLen int64
	// FleetTTL is how long an instance's fleet entry lives without a
	// heartbeat; heartbeats should come at least twice per TTL.
	FleetTTL time.Duration
}

// DefaultConfig returns the production settings.
func DefaultConfig() Config {
	return Config{Prefix: "parley:", PollInterval: 2 * time.Second, HistoryLen: 1000, FleetTTL: 15 * time.Second}
}

// Validate reports the first setting out of range.
func (c Config) Validate() error {
	switch {
	case c.PollInterval <= 0:
		return fmt.Errorf("rollout config: poll interval %v must be positive", c.PollInterval)
	case c.HistoryLen < 1:
		return fmt.Errorf("rollout config: history length %d must be at least 1", c.HistoryLen)
	case c.FleetTTL < time.Second:
		return fmt.Errorf("rollout config: fleet ttl %v must be at least 1s", c.FleetTTL)
	}
	return nil
}

// Client reads and changes rollout state in Redis. It is safe for concurrent use.
type Client struct {
	rdb redis.UniversalClient
	cfg Config
	log *slog.Logger
}

// New returns a Client on rdb.
func New(rdb redis.UniversalClient, cfg Config, log *slog.Logger) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{rdb: rdb, cfg: cfg, log: log}, nil
}

// StateKey is the hash that holds a deployment's rollout state. The braces
// are a Redis Cluster hash tag: the state, its history and its events share a
// slot, so casScript touches one.
func (c *Client) StateKey(deployment string) string {
	return c.cfg.Prefix + "rollout:{" + deployment + "}"
}

// HistoryKey is the list of a deployment's changes, oldest first.
func (c *Client) HistoryKey(deployment string) string { return c.StateKey(deployment) + ":history" }

// EventsChannel is the channel a deployment's changes are published on.
func (c *Client) EventsChannel(deployment string) string { return c.StateKey(deployment) + ":events" }

// Get reads a deployment's state, or ErrNotFound.
func (c *Client) Get(ctx context.Context, deployment string) (schema.RolloutState, error) {
	h, err := c.rdb.HGetAll(ctx, c.StateKey(deployment)).Result()
	if err != nil {
		return schema.RolloutState{}, fmt.Errorf("get rollout %q: %w", deployment, err)
	}
	if len(h) == 0 {
		return schema.RolloutState{}, fmt.Errorf("get rollout %q: %w", deployment, ErrNotFound)
	}
	s, err := decodeState(deployment, h)
	if err != nil {
		return schema.RolloutState{}, fmt.Errorf("get rollout %q: %w", deployment, err)
	}
	return s, nil
}

// Init creates a steady state at generation 1 serving stable. It returns
// ErrExists, and the current state, when the deployment already has one.
func (c *Client) Init(ctx context.Context, deployment, stable, by string) (schema.RolloutState, error) {
	to := schema.RolloutState{
		Deployment: deployment, Stable: stable, State: schema.PhaseSteady,
		Generation: 1, UpdatedBy: by, UpdatedAt: time.Now().UTC(),
	}
	change := schema.RolloutChange{Action: string(ActionInit), By: by, At: to.UpdatedAt, From: schema.RolloutState{Deployment: deployment}, To: to}
	if err := c.write(ctx, change, 0); err != nil {
		if errors.Is(err, ErrConflict) {
			cur, gerr := c.Get(ctx, deployment)
			if gerr != nil {
				return schema.RolloutState{}, gerr
			}
			return cur, fmt.Errorf("init rollout %q: %w", deployment, ErrExists)
		}
		return schema.RolloutState{}, fmt.Errorf("init rollout %q: %w", deployment, err)
	}
	return to, nil
}

// Apply makes one live-ops change as a compare-and-set: it reads the state,
// computes the next one (see Next), and writes it only if the generation is
// still the one it read (and req.Generation, when set). Exactly one of
// several concurrent changes from the same generation wins; the others get
// ErrConflict.
func (c *Client) Apply(ctx context.Context, deployment string, req Request) (schema.RolloutChange, error) {
	fail := func(err error) (schema.RolloutChange, error) {
		return schema.RolloutChange{}, fmt.Errorf("%s %q: %w", req.Action, deployment, err)
	}
	from, err := c.Get(ctx, deployment)
	if err != nil {
		return fail(err)
	}
	if req.Generation != nil && *req.Generation != from.Generation {
		return fail(fmt.Errorf("expected generation %d, it is %d: %w", *req.Generation, from.Generation, ErrConflict))
	}
	to, err := Next(from, req, time.Now())
	if err != nil {
		return fail(err)
	}
	change := schema.RolloutChange{Action: string(req.Action), By: req.By, At: to.UpdatedAt, Reason: req.Reason, From: from, To: to}
	if err := c.write(ctx, change, from.Generation); err != nil {
		return fail(err)
	}
	c.log.Info("rollout changed", "deployment", deployment, "action", req.Action, "by", req.By,
		"generation", to.Generation, "stable", to.Stable, "canary", to.Canary, "weight", to.CanaryWeight)
	return change, nil
}

// Canary starts or ramps a canary.
func (c *Client) Canary(ctx context.Context, deployment, version string, weight int, by string) (schema.RolloutChange, error) {
	return c.Apply(ctx, deployment, Request{Action: ActionCanary, Version: version, Weight: weight, By: by})
}

// AdvanceAt moves a stepped canary to its next step only if the state is
// still at generation (the analysis that allowed it read that state).
func (c *Client) AdvanceAt(ctx context.Context, deployment string, generation int64, by, reason string) (schema.RolloutChange, error) {
	return c.Apply(ctx, deployment, Request{Action: ActionAdvance, By: by, Reason: reason, Generation: &generation})
}

// PauseAt pauses the canary with a reason in the state only if it is still
// at generation: how the analysis holds an experiment whose sample ratio
// or assignment audit failed.
func (c *Client) PauseAt(ctx context.Context, deployment string, generation int64, by, reason string) (schema.RolloutChange, error) {
	return c.Apply(ctx, deployment, Request{Action: ActionPause, By: by, Reason: reason, Generation: &generation})
}

// Promote makes the canary stable.
func (c *Client) Promote(ctx context.Context, deployment, by, reason string) (schema.RolloutChange, error) {
	return c.Apply(ctx, deployment, Request{Action: ActionPromote, By: by, Reason: reason})
}

// Rollback stops sending new sessions to the canary.
func (c *Client) Rollback(ctx context.Context, deployment, by, reason string) (schema.RolloutChange, error) {
	return c.Apply(ctx, deployment, Request{Action: ActionRollback, By: by, Reason: reason})
}

// PromoteAt promotes only if the state is still at generation, for automated
// callers that decided on that state (rollout/abtest's Watchdog).
func (c *Client) PromoteAt(ctx context.Context, deployment string, generation int64, by, reason string) (schema.RolloutChange, error) {
	return c.Apply(ctx, deployment, Request{Action: ActionPromote, By: by, Reason: reason, Generation: &generation})
}

// RollbackAt rolls back only if the state is still at generation.
func (c *Client) RollbackAt(ctx context.Context, deployment string, generation int64, by, reason string) (schema.RolloutChange, error) {
	return c.Apply(ctx, deployment, Request{Action: ActionRollback, By: by, Reason: reason, Generation: &generation})
}

// Restore writes s back when Redis has no state for its deployment or an
// older generation than s, as after a Redis restart that lost its data; the
// fleet's highest generation wins. It reports whether it wrote.
func (c *Client) Restore(ctx context.Context, s schema.RolloutState, by string) (bool, error) {
	cur, err := c.Get(ctx, s.Deployment)
	switch {
	case errors.Is(err, ErrNotFound):
		cur = schema.RolloutState{Deployment: s.Deployment}
	case err != nil:
		return false, fmt.Errorf("restore rollout %q: %w", s.Deployment, err)
	case cur.Generation >= s.Generation:
		return false, nil
	}
	change := schema.RolloutChange{Action: string(ActionRestore), By: by, At: time.Now().UTC(),
		Reason: fmt.Sprintf("generation %d was missing from redis", s.Generation), From: cur, To: s}
	if err := c.write(ctx, change, cur.Generation); err != nil {
		if errors.Is(err, ErrConflict) {
			return false, nil
		}
		return false, fmt.Errorf("restore rollout %q: %w", s.Deployment, err)
	}
	c.log.Warn("rollout state restored into redis", "deployment", s.Deployment, "generation", s.Generation, "by", by)
	return true, nil
}

// History returns up to the last n changes of a deployment, oldest first.
func (c *Client) History(ctx context.Context, deployment string, n int64) ([]schema.RolloutChange, error) {
	if n < 1 {
		return nil, nil
	}
	raw, err := c.rdb.LRange(ctx, c.HistoryKey(deployment), -n, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("rollout history %q: %w", deployment, err)
	}
	out := make([]schema.RolloutChange, 0, len(raw))
	for _, r := range raw {
		var ch schema.RolloutChange
		if err := json.Unmarshal([]byte(r), &ch); err != nil {
			return nil, fmt.Errorf("rollout history %q: %w", deployment, err)
		}
		out = append(out, ch)
	}
	return out, nil
}

// casScript writes the state hash if its generation is still ARGV[1] ("0":
// the hash must not exist), appends the change to the history (trimmed to
// ARGV[4] entries) and publishes it on ARGV[3]; all or nothing.
// KEYS: state hash, history list. ARGV: expected generation, change JSON,
// channel, history length, then the hash's field/value pairs.
var casScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], 'generation')
if ARGV[1] == '0' then
  if cur then return 0 end
elseif cur ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[4]), -1)
redis.call('PUBLISH', ARGV[3], ARGV[2])
return 1
`)

func (c *Client) write(ctx context.Context, ch schema.RolloutChange, expect int64) error {
	if err := ch.Validate(); err != nil {
		return err
	}
	raw, err := json.Marshal(ch)
	if err != nil {
		return err
	}
	d := ch.To.Deployment
	args := []any{strconv.FormatInt(expect, 10), raw, c.EventsChannel(d), c.cfg.HistoryLen}
	args = append(args, encodeState(ch.To)...)
	ok, err := casScript.Run(ctx, c.rdb, []string{c.StateKey(d), c.HistoryKey(d)}, args...).Int()
	if err != nil {
		return err
	}
	if ok != 1 {
		return fmt.Errorf("generation is no longer %d: %w", expect, ErrConflict)
	}
	return nil
}

func encodeState(s schema.RolloutState) []any {
	return []any{
		"deployment", s.Deployment,
		"stable", s.Stable,
		"canary", s.Canary,
		"canary_weight", strconv.Itoa(s.CanaryWeight),
		"experiment_id", s.ExperimentID,
		"salt", s.Salt,
		"split", strconv.Itoa(s.Split),
		"steps", joinInts(s.Steps),
		"step", strconv.Itoa(s.Step),
		"step_generation", strconv.FormatInt(s.StepGeneration, 10),
		"min_step_players", strconv.Itoa(s.MinStepPlayers),
		"pause_reason", s.PauseReason,
		"state", string(s.State),
		"generation", strconv.FormatInt(s.Generation, 10),
		"updated_by", s.UpdatedBy,
		"updated_at", s.UpdatedAt.UTC().Format(time.RFC3339Nano),
	}
}

func decodeState(deployment string, h map[string]string) (schema.RolloutState, error) {
	s := schema.RolloutState{
		Deployment:   deployment,
		Stable:       h["stable"],
		Canary:       h["canary"],
		ExperimentID: h["experiment_id"],
		Salt:         h["salt"],
		PauseReason:  h["pause_reason"],
		State:        schema.RolloutPhase(h["state"]),
		UpdatedBy:    h["updated_by"],
	}
	var err error
	if s.CanaryWeight, err = strconv.Atoi(h["canary_weight"]); err != nil {
		return s, fmt.Errorf("canary_weight: %w", err)
	}
	// Fields a state written before canary steps and salts lacks are zero.
	for name, v := range map[string]*int{"split": &s.Split, "step": &s.Step, "min_step_players": &s.MinStepPlayers} {
		if h[name] == "" {
			continue
		}
		if *v, err = strconv.Atoi(h[name]); err != nil {
			return s, fmt.Errorf("%s: %w", name, err)
		}
	}
	if s.Steps, err = splitInts(h["steps"]); err != nil {
		return s, fmt.Errorf("steps: %w", err)
	}
	if s.Generation, err = strconv.ParseInt(h["generation"], 10, 64); err != nil {
		return s, fmt.Errorf("generation: %w", err)
	}
	if h["step_generation"] != "" {
		if s.StepGeneration, err = strconv.ParseInt(h["step_generation"], 10, 64); err != nil {
			return s, fmt.Errorf("step_generation: %w", err)
		}
	}
	if s.UpdatedAt, err = time.Parse(time.RFC3339Nano, h["updated_at"]); err != nil {
		return s, fmt.Errorf("updated_at: %w", err)
	}
	if err := s.Validate(); err != nil {
		return s, err
	}
	return s, nil
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}

func splitInts(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for p := range strings.SplitSeq(s, ",") {
		x, err := strconv.Atoi(p)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}
