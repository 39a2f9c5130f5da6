// Package bots plays the simulator's personas against a running gateway over
// its player API (gateway/client): [Run] drives [Config.Sessions] sessions and
// returns a [Summary] of exchange lengths per arm and policy version, end
// reasons and errors. It is a package of its own so that the learner, which
// uses the simulator's players, does not depend on the gateway's client.
package bots

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/parleyhq/parley/gateway/client"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// Config configures Run: personas that play against a running
// gateway over its player API.
type Config struct {
	GatewayURL  string `json:"gateway_url"`
	APIKey      string `json:"-"`
	Players     int    `json:"players"`     // population size; session i plays persona i mod Players
	Sessions    int    `json:"sessions"`    // sessions in all
	Concurrency int    `json:"concurrency"` // sessions at a time
	Seed        uint64 `json:"seed"`
	NPCID       string `json:"npc_id,omitempty"`
	// MaxTurns ends a session from the client side after that many
	// exchanges, telling the gateway max_turns; 0 leaves the limit to the
	// gateway.
	MaxTurns int `json:"max_turns"`
	// ThinkTime is how long a persona waits before each message after its
	// first, as a player reads the reply and types. With 0 the load is
	// closed-loop: a bot starts its next request the moment a reply comes,
	// so the arm of an A/B test whose sessions run longer holds more of the
	// Concurrency sessions at once, and its engine more of the load.
	ThinkTime time.Duration `json:"think_time"`
	// LeaveIdle makes a persona that goes idle just stop, leaving the session
	// to the gateway's idle timeout, instead of calling /end.
	LeaveIdle bool `json:"leave_idle"`
	// MaxRetries bounds the retries of one request answered 429 or 503;
	// without Retry-After the wait is RetryBase·2^attempt, at most MaxRetryWait.
	MaxRetries     int           `json:"max_retries"`
	RetryBase      time.Duration `json:"retry_base"`
	MaxRetryWait   time.Duration `json:"max_retry_wait"`
	RequestTimeout time.Duration `json:"request_timeout"`
	// Population draws the players; its Size is replaced by Players.
	Population simulator.PopulationConfig `json:"population"`
	// Client, when set, sends the requests (tests, custom transports).
	Client *http.Client `json:"-"`
}

// DefaultConfig returns 20 players, 100 sessions, 4 at a time.
func DefaultConfig() Config {
	return Config{
		GatewayURL: "http://localhost:8080", Players: 20, Sessions: 100, Concurrency: 4, Seed: 1,
		MaxTurns: 30, MaxRetries: 5, RetryBase: 200 * time.Millisecond, MaxRetryWait: 10 * time.Second,
		RequestTimeout: 60 * time.Second, Population: simulator.DefaultPopulationConfig(),
	}
}

// Validate checks the URL and the counts.
func (c Config) Validate() error {
	u, err := url.Parse(c.GatewayURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("bots: gateway url %q must be http(s)://host[:port]", c.GatewayURL)
	}
	if c.Players < 1 || c.Sessions < 1 || c.Concurrency < 1 {
		return fmt.Errorf("bots: players %d, sessions %d and concurrency %d must be at least 1", c.Players, c.Sessions, c.Concurrency)
	}
	if c.MaxTurns < 0 || c.MaxRetries < 0 || c.ThinkTime < 0 || c.RetryBase <= 0 || c.MaxRetryWait < c.RetryBase || c.RequestTimeout <= 0 {
		return errors.New("bots: max turns, retries and think time must not be negative; retry waits and request timeout must be positive")
	}
	p := c.Population
	p.Size = c.Players
	return p.Validate()
}

// Summary is what Run measured. Avg.L and the per-arm and
// per-policy figures count only sessions that ended without error.
type Summary struct {
	Sessions   int                           `json:"sessions"`
	Completed  int                           `json:"completed"`
	Exchanges  int                           `json:"exchanges"`
	AvgL       float64                       `json:"avg_l"`
	PerArm     map[string]schema.LengthStats `json:"per_arm"`
	PerPolicy  map[string]schema.LengthStats `json:"per_policy"`
	EndReasons map[string]int                `json:"end_reasons"`
	Errors     int                           `json:"errors"`
	ErrorCodes map[string]int                `json:"error_codes"`
	Retries    int                           `json:"retries"`
	Seconds    float64                       `json:"seconds"`
}

// noArm labels sessions outside any experiment in Summary.PerArm.
const noArm = "none"

// sessionResult is one session as the driver saw it.
type sessionResult struct {
	arm, policy string
	turns       int
	reason      schema.EndReason
	errCode     string // "" when the session ended cleanly
	retries     int
}

func newSummary() Summary {
	return Summary{
		PerArm: make(map[string]schema.LengthStats), PerPolicy: make(map[string]schema.LengthStats),
		EndReasons: make(map[string]int), ErrorCodes: make(map[string]int),
	}
}

// add counts one session in the summary.
func (s *Summary) add(r sessionResult) {
	s.Sessions++
	s.Retries += r.retries
	if r.errCode != "" {
		s.Errors++
		s.ErrorCodes[r.errCode]++
		s.EndReasons[string(schema.EndError)]++
		return
	}
	s.Completed++
	s.Exchanges += r.turns
	s.AvgL = float64(s.Exchanges) / float64(s.Completed)
	s.EndReasons[string(r.reason)]++
	arm := r.arm
	if arm == "" {
		arm = noArm
	}
	s.PerArm[arm] = s.PerArm[arm].Add(r.turns)
	s.PerPolicy[r.policy] = s.PerPolicy[r.policy].Add(r.turns)
}

// WriteTable prints the summary as aligned text tables.
func (s Summary) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "sessions\tcompleted\terrors\tretries\texchanges\tAvg.L\tseconds\n")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%.2f\t%.1f\n\n", s.Sessions, s.Completed, s.Errors, s.Retries, s.Exchanges, s.AvgL, s.Seconds)
	table := func(title string, m map[string]schema.LengthStats) {
		fmt.Fprintf(tw, "%s\tsessions\tAvg.L\n", title)
		for _, k := range sortedKeys(m) {
			fmt.Fprintf(tw, "%s\t%d\t%.2f\n", k, m[k].Sessions, m[k].AvgL)
		}
		fmt.Fprintln(tw)
	}
	table("arm", s.PerArm)
	table("policy", s.PerPolicy)
	counts := func(title string, m map[string]int) {
		fmt.Fprintf(tw, "%s\tsessions\n", title)
		for _, k := range sortedKeys(m) {
			fmt.Fprintf(tw, "%s\t%d\n", k, m[k])
		}
	}
	counts("end reason", s.EndReasons)
	if len(s.ErrorCodes) > 0 {
		fmt.Fprintln(tw)
		counts("error code", s.ErrorCodes)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write bots summary: %w", err)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Run plays cfg.Sessions sessions of the population against the gateway
// at cfg.GatewayURL, cfg.Concurrency at a time, and summarises them. A
// failed session counts as an error and the run goes on; Run returns an
// error only for a bad config or a cancelled context (with the summary so far).
func Run(ctx context.Context, cfg Config, logger *slog.Logger) (Summary, error) {
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	pcfg := cfg.Population
	pcfg.Size = cfg.Players
	pop, err := simulator.NewPopulation(pcfg, cfg.Seed)
	if err != nil {
		return Summary{}, err
	}
	hc := cfg.Client
	if hc == nil {
		hc = &http.Client{Timeout: cfg.RequestTimeout}
	}
	b := &bot{cfg: cfg, api: &client.Client{BaseURL: cfg.GatewayURL, APIKey: cfg.APIKey, HTTP: hc}, logger: logger}

	began := time.Now()
	summary := newSummary()
	var mu sync.Mutex
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for i := range jobs {
				p := pop.Players()[i%len(pop.Players())]
				r := b.play(ctx, p, i)
				mu.Lock()
				summary.add(r)
				mu.Unlock()
			}
		})
	}
dispatch:
	for i := range cfg.Sessions {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(jobs)
	wg.Wait()
	summary.Seconds = time.Since(began).Seconds()
	logger.Info("bots done", "sessions", summary.Sessions, "avg_l", summary.AvgL, "errors", summary.Errors)
	if err := ctx.Err(); err != nil {
		return summary, fmt.Errorf("run bots: %w", err)
	}
	return summary, nil
}

// bot sends one persona's requests.
type bot struct {
	cfg    Config
	api    *client.Client
	logger *slog.Logger
}

// play runs session i of persona p to its end.
func (b *bot) play(ctx context.Context, p *simulator.Persona, i int) sessionResult {
	var r sessionResult
	fail := func(stage string, err error) sessionResult {
		r.errCode = errorCode(err)
		level := slog.LevelWarn
		if ctx.Err() != nil {
			level = slog.LevelInfo
		}
		b.logger.Log(ctx, level, "bot session failed", "player", p.ID, "stage", stage, "turns", r.turns, "err", err)
		return r
	}
	conv := p.Start(b.cfg.Seed ^ uint64(i)*0x9e3779b97f4a7c15)
	var created schema.CreateSessionResponse
	n, err := b.retry(ctx, func() (err error) {
		created, err = b.api.CreateSession(ctx, schema.CreateSessionRequest{PlayerID: p.ID, NPCID: b.cfg.NPCID})
		return err
	})
	r.retries += n
	if err != nil {
		return fail("create", err)
	}
	r.arm, r.policy = created.Arm, created.PolicyVersion

	text := conv.Opening()
	for {
		var msg schema.MessageResponse
		n, err := b.retry(ctx, func() (err error) {
			msg, err = b.api.SendMessage(ctx, created.SessionID, text)
			return err
		})
		r.retries += n
		if err != nil {
			return fail("message", err)
		}
		r.turns = msg.Turn
		if msg.Ended != "" {
			r.reason = msg.Ended
			return r
		}
		if b.cfg.MaxTurns > 0 && r.turns >= b.cfg.MaxTurns {
			r.reason = schema.EndMaxTurns
			break
		}
		reply, end, _ := conv.Respond(msg.Reply)
		if end {
			r.reason = conv.Reason()
			if r.reason == schema.EndIdleTimeout && b.cfg.LeaveIdle {
				return r
			}
			break
		}
		text = reply
		if err := wait(ctx, b.cfg.ThinkTime); err != nil {
			return fail("think", err)
		}
	}
	// The bot's own cap on exchanges ends the session with max_turns, so
	// that the learner does not count it as the player's decision to quit.
	var reason schema.EndReason
	if r.reason == schema.EndMaxTurns {
		reason = r.reason
	}
	n, err = b.retry(ctx, func() error {
		_, err := b.api.EndSession(ctx, created.SessionID, reason)
		return err
	})
	r.retries += n
	if err != nil {
		return fail("end", err)
	}
	return r
}

// retry calls call until it succeeds, fails with other than a 429 or 503
// answer, or has been retried MaxRetries times, and returns how many times it
// retried. It waits what Retry-After says, or RetryBase·2^attempt without
// one, at most MaxRetryWait.
func (b *bot) retry(ctx context.Context, call func() error) (int, error) {
	for attempt := 0; ; attempt++ {
		err := call()
		var apiErr *client.Error
		if err == nil || !errors.As(err, &apiErr) || attempt >= b.cfg.MaxRetries ||
			apiErr.Status != http.StatusTooManyRequests && apiErr.Status != http.StatusServiceUnavailable {
			return attempt, err
		}
		delay := apiErr.RetryAfter
		if delay <= 0 {
			delay = time.Duration(float64(b.cfg.RetryBase) * math.Pow(2, float64(attempt)))
		}
		if err := wait(ctx, min(delay, b.cfg.MaxRetryWait)); err != nil {
			return attempt, fmt.Errorf("retry: %w", err)
		}
	}
}

// wait sleeps for d, or until ctx is done.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errorCode names an error for Summary.ErrorCodes: the gateway's code,
// "cancelled", "timeout", "invalid_response" or "transport".
func errorCode(err error) string {
	var apiErr *client.Error
	switch {
	case errors.As(err, &apiErr):
		return apiErr.Code
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, client.ErrInvalidResponse):
		return "invalid_response"
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return "timeout"
	}
	return "transport"
}
