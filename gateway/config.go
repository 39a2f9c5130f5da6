package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/parleyhq/parley/inference"
)

// Config is how a gateway serves. Every limit is a value here; cmd/parley
// fills it from flags and the environment.
type Config struct {
	// Addr is the listen address, host:port.
	Addr string
	// Deployment names the NPC deployment in events and rollout keys.
	Deployment string
	// KeyPrefix starts every Redis key, such as "parley:".
	KeyPrefix string
	// PolicyVersion is the version new sessions pin when no Router is given.
	PolicyVersion string

	// MaxBodyBytes bounds a request body (413 beyond).
	MaxBodyBytes int64
	// MaxMessageBytes bounds one player message (413 beyond).
	MaxMessageBytes int
	// MaxTurns ends a session with max_turns after that many exchanges.
	MaxTurns int
	// MaxHistory is how many exchanges a session keeps; the prompt takes as
	// many of the latest as fit the model context.
	MaxHistory int

	// IdleTimeout ends a session with idle_timeout after that long without a message.
	IdleTimeout time.Duration
	// SweepInterval is how often a gateway looks for idle sessions.
	SweepInterval time.Duration
	// EndedRetention is how long an ended session stays readable (and answers 409).
	EndedRetention time.Duration
	// RequestTimeout bounds one request, generation included.
	RequestTimeout time.Duration
	// ShutdownTimeout bounds how long Run waits for in-flight requests when stopping.
	ShutdownTimeout time.Duration

	// ClientRate and ClientBurst are the token bucket of one API client
	// (requests per second, bucket size); PlayerRate and PlayerBurst that of
	// one player of one client. A rate of 0 turns the bucket off.
	ClientRate  float64
	ClientBurst int
	PlayerRate  float64
	PlayerBurst int

	// KeyCacheTTL is how long a gateway keeps a resolved API key (0 asks
	// Redis on every request); a revoked key works at most that long.
	KeyCacheTTL time.Duration
	// KeyCacheSize bounds the cached API keys.
	KeyCacheSize int
	// SSEKeepAlive is how often a stream whose reply has not started sends
	// a ": keep-alive" comment (0: never).
	SSEKeepAlive time.Duration

	// ReplicaAcks is how many Redis replicas must confirm a new session and
	// each saved turn before the player is answered (Redis WAIT), so that a
	// failover to a replica keeps every acknowledged turn: replication is
	// asynchronous, and a primary killed right after answering takes its
	// last writes with it. 0 answers at once. It is for a single primary
	// with replicas (Sentinel), not a cluster. When fewer replicas confirm
	// within ReplicaAckTimeout (one is down), the player is answered anyway
	// and a warning logged, so a lost replica costs latency, not service.
	ReplicaAcks       int
	ReplicaAckTimeout time.Duration

	// DefaultNPC is the persona of sessions that name none.
	DefaultNPC string
	// Personas are the NPCs by id.
	Personas map[string]Persona
	// Sampling is how replies are sampled.
	Sampling Sampling
}

// Persona is one NPC: the card that opens its prompt and an optional greeting.
type Persona struct {
	Name     string `json:"name"`
	Card     string `json:"card"`
	Greeting string `json:"greeting,omitempty"`
}

// Sampling holds the sampling parameters of NPC replies.
type Sampling struct {
	MaxTokens   int
	Temperature float32
	TopK        int
	TopP        float32
	// Seed, when not 0, makes sampling repeatable (tests, benchmarks).
	Seed uint64
}

// DefaultConfig serves on 127.0.0.1:8080 with the paper's sampling defaults
// (top-k 50, temperature 0.7) and the companion persona.
func DefaultConfig() Config {
	return Config{
		Addr:              "127.0.0.1:8080",
		Deployment:        "companion",
		KeyPrefix:         "parley:",
		PolicyVersion:     "v0",
		MaxBodyBytes:      64 << 10,
		MaxMessageBytes:   2000,
		MaxTurns:          50,
		MaxHistory:        50,
		IdleTimeout:       10 * time.Minute,
		SweepInterval:     5 * time.Second,
		EndedRetention:    time.Hour,
		RequestTimeout:    60 * time.Second,
		ShutdownTimeout:   30 * time.Second,
		ClientRate:        200,
		ClientBurst:       400,
		PlayerRate:        1,
		PlayerBurst:       5,
		KeyCacheTTL:       5 * time.Second,
		KeyCacheSize:      10000,
		SSEKeepAlive:      15 * time.Second,
		ReplicaAckTimeout: time.Second,
		DefaultNPC:        "mira",
		Personas: map[string]Persona{
			"mira": {Name: "Mira", Card: inference.CompanionCard, Greeting: inference.CompanionGreeting},
		},
		Sampling: Sampling{MaxTokens: 64, Temperature: 0.7, TopK: 50, TopP: 1},
	}
}

var (
	npcIDRE  = regexp.MustCompile(`^[A-Za-z0-9._:@-]{1,128}$`)
	prefixRE = regexp.MustCompile(`^[A-Za-z0-9._:{}-]*$`)
)

// Validate reports the first field that is unusable.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("gateway: addr %q is not host:port: %w", c.Addr, err)
	}
	if c.Deployment == "" || strings.ContainsAny(c.Deployment, " :{}") {
		return fmt.Errorf("gateway: deployment %q must be non-empty without spaces, colons or braces", c.Deployment)
	}
	if !prefixRE.MatchString(c.KeyPrefix) {
		return fmt.Errorf("gateway: key prefix %q has characters outside A-Z a-z 0-9 . _ : { } -", c.KeyPrefix)
	}
	if c.PolicyVersion == "" {
		return errors.New("gateway: policy version is required")
	}
	checks := []struct {
		name string
		ok   bool
	}{
		{"max body bytes", c.MaxBodyBytes >= 256},
		{"max message bytes", c.MaxMessageBytes >= 1 && int64(c.MaxMessageBytes) < c.MaxBodyBytes},
		{"max turns", c.MaxTurns >= 1},
		{"max history", c.MaxHistory >= 0},
		{"idle timeout", c.IdleTimeout > 0},
		{"sweep interval", c.SweepInterval > 0},
		{"ended retention", c.EndedRetention > 0},
		{"request timeout", c.RequestTimeout > 0},
		{"shutdown timeout", c.ShutdownTimeout > 0},
		{"client rate", c.ClientRate >= 0 && (c.ClientRate == 0 || c.ClientBurst >= 1)},
		{"player rate", c.PlayerRate >= 0 && (c.PlayerRate == 0 || c.PlayerBurst >= 1)},
		{"key cache ttl", c.KeyCacheTTL >= 0 && (c.KeyCacheTTL == 0 || c.KeyCacheSize >= 1)},
		{"sse keep-alive", c.SSEKeepAlive >= 0},
		{"replica acks", c.ReplicaAcks >= 0 && (c.ReplicaAcks == 0 || c.ReplicaAckTimeout > 0)},
		{"sampling max tokens", c.Sampling.MaxTokens >= 1},
		{"sampling temperature", c.Sampling.Temperature >= 0 && c.Sampling.Temperature <= 2},
		{"sampling top-k", c.Sampling.TopK >= 0},
		{"sampling top-p", c.Sampling.TopP > 0 && c.Sampling.TopP <= 1},
	}
	for _, ch := range checks {
		if !ch.ok {
			return fmt.Errorf("gateway: %s is out of range", ch.name)
		}
	}
	if _, ok := c.Personas[c.DefaultNPC]; !ok {
		return fmt.Errorf("gateway: default npc %q has no persona", c.DefaultNPC)
	}
	for id, p := range c.Personas {
		if !npcIDRE.MatchString(id) {
			return fmt.Errorf("gateway: persona id %q must be 1-128 characters of A-Z a-z 0-9 . _ : @ -", id)
		}
		if strings.TrimSpace(p.Card) == "" {
			return fmt.Errorf("gateway: persona %q has no card", id)
		}
	}
	return nil
}

// clone copies c so that the caller's later changes do not reach the server.
func (c Config) clone() Config {
	p := make(map[string]Persona, len(c.Personas))
	for k, v := range c.Personas {
		p[k] = v
	}
	c.Personas = p
	return c
}

// LoadPersonas reads NPC persona cards from a JSON file: an object of NPC
// id → {"name", "card", "greeting"}.
func LoadPersonas(path string) (map[string]Persona, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load personas %q: %w", path, err)
	}
	var m map[string]Persona
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("load personas %q: %w", path, err)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("load personas %q: no personas", path)
	}
	return m, nil
}
