package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/gateway/client"
	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/rollout/abtest"
	"github.com/parleyhq/parley/schema"
)

// GatewayConfig says what RunGateway measures.
type GatewayConfig struct {
	// Redis holds the bench's sessions under a random key prefix, deleted afterwards.
	Redis redis.UniversalClient
	// Engine is the real model; nil skips the real-model points.
	Engine gateway.Generator
	// Tokenizer splits the stub engine's reply; nil takes Engine's.
	Tokenizer *inference.Tokenizer
	// Events is the session logger measured against logging off (a sink that
	// drops events); nil skips the logging comparison.
	Events gateway.EventSink
	// Concurrency lists the numbers of concurrent sessions, such as 1, 16, 64.
	Concurrency []int
	// Duration is how long each point runs.
	Duration time.Duration
	// Gateway is the server's configuration; Addr, KeyPrefix, the rate
	// limits and MaxTurns are overridden for the bench.
	Gateway gateway.Config
	Logger  *slog.Logger
}

// DefaultGatewayConfig measures 1, 16 and 64 sessions for 5 s each (plus
// the time the messages in flight at the end take).
func DefaultGatewayConfig() GatewayConfig {
	return GatewayConfig{Concurrency: []int{1, 16, 64}, Duration: 5 * time.Second, Gateway: gateway.DefaultConfig()}
}

// Validate reports the first unusable field.
func (c GatewayConfig) Validate() error {
	switch {
	case c.Redis == nil:
		return errors.New("bench gateway: a redis client is required")
	case c.Engine == nil && c.Tokenizer == nil:
		return errors.New("bench gateway: an engine or a tokenizer is required")
	case len(c.Concurrency) == 0 || slices.Min(c.Concurrency) < 1:
		return errors.New("bench gateway: concurrency levels must be positive")
	case c.Duration <= 0:
		return errors.New("bench gateway: duration must be positive")
	}
	return nil
}

// GatewayReport is the outcome of RunGateway, written as JSON by `parley bench gateway`.
type GatewayReport struct {
	Points []GatewayPoint `json:"points"`
	// Logging compares Kafka logging on with off on the stub engine, so the
	// gateway's own cost is not hidden behind the model's.
	Logging []LoggingOverhead `json:"logging,omitempty"`
}

// GatewayPoint is one measured configuration: messages over loopback.
type GatewayPoint struct {
	Engine      string  `json:"engine"` // "stub" or "model"
	Logging     bool    `json:"logging"`
	Concurrency int     `json:"concurrency"`
	Requests    int     `json:"requests"`
	Errors      int     `json:"errors"`
	Seconds     float64 `json:"seconds"`
	RPS         float64 `json:"requests_per_second"`
	P50MS       float64 `json:"p50_ms"`
	P95MS       float64 `json:"p95_ms"`
	P99MS       float64 `json:"p99_ms"`
}

// LoggingOverhead is logging on against off at one concurrency: the
// throughput ratio (on ÷ off, 1 is free) and the median latency ratio.
type LoggingOverhead struct {
	Concurrency     int     `json:"concurrency"`
	ThroughputRatio float64 `json:"throughput_ratio"`
	P50Ratio        float64 `json:"p50_latency_ratio"`
}

// discardSink drops every event: logging off.
type discardSink struct{}

func (discardSink) Publish(context.Context, schema.SessionEvent) error { return nil }

// stubReply is the stub engine's canned reply (about 20 tokens).
const stubReply = "Hey, you're back! The road north is quiet tonight. Shall we camp by the river or push on?"

// RunGateway serves a gateway on loopback and measures messages per second
// and latency percentiles at each concurrency, with the stub engine (the
// gateway's own overhead), with the real model when given, and with
// logging on and off. It prints a table to w as it goes.
func RunGateway(ctx context.Context, cfg GatewayConfig, w io.Writer) (GatewayReport, error) {
	if err := cfg.Validate(); err != nil {
		return GatewayReport{}, err
	}
	tok := cfg.Tokenizer
	if tok == nil {
		tok = cfg.Engine.Tokenizer()
	}
	maxSeq := 512
	if cfg.Engine != nil {
		maxSeq = cfg.Engine.MaxSeq()
	}
	stub := NewInstantGenerator(tok, stubReply, maxSeq)

	gcfg := cfg.Gateway
	gcfg.KeyPrefix = "parley-bench-" + randomHex(4) + ":"
	gcfg.Addr = "127.0.0.1:0"
	gcfg.ClientRate, gcfg.PlayerRate = 0, 0
	gcfg.MaxTurns = 1 << 30
	gcfg.MaxHistory = min(gcfg.MaxHistory, 8)
	defer deletePrefix(cfg.Redis, gcfg.KeyPrefix)

	type run struct {
		engine string
		gen    gateway.Generator
		sink   gateway.EventSink
	}
	var runs []run
	runs = append(runs, run{"stub", stub, discardSink{}})
	if cfg.Events != nil {
		runs = append(runs, run{"stub", stub, cfg.Events})
	}
	if cfg.Engine != nil {
		runs = append(runs, run{"model", cfg.Engine, discardSink{}})
	}
	var rep GatewayReport
	fmt.Fprintf(w, "%-6s %-8s %5s %9s %7s %9s %9s %9s\n", "engine", "logging", "conc", "req/s", "errors", "p50 ms", "p95 ms", "p99 ms")
	for _, r := range runs {
		for _, c := range cfg.Concurrency {
			p, err := gatewayPoint(ctx, gcfg, cfg, r.gen, r.sink, c)
			if err != nil {
				return rep, err
			}
			p.Engine, p.Logging = r.engine, r.sink != discardSink{}
			rep.Points = append(rep.Points, p)
			fmt.Fprintf(w, "%-6s %-8v %5d %9.1f %7d %9.2f %9.2f %9.2f\n", p.Engine, p.Logging, p.Concurrency, p.RPS, p.Errors, p.P50MS, p.P95MS, p.P99MS)
		}
	}
	if cfg.Events != nil {
		for _, c := range cfg.Concurrency {
			var off, on *GatewayPoint
			for i := range rep.Points {
				p := &rep.Points[i]
				if p.Engine == "stub" && p.Concurrency == c {
					if p.Logging {
						on = p
					} else {
						off = p
					}
				}
			}
			if off != nil && on != nil && off.RPS > 0 && off.P50MS > 0 {
				o := LoggingOverhead{Concurrency: c, ThroughputRatio: on.RPS / off.RPS, P50Ratio: on.P50MS / off.P50MS}
				rep.Logging = append(rep.Logging, o)
				fmt.Fprintf(w, "logging on/off at %d sessions: throughput ×%.3f, p50 latency ×%.3f\n", c, o.ThroughputRatio, o.P50Ratio)
			}
		}
	}
	return rep, nil
}

// ServeGateway serves a gateway with cfg and deps on a loopback port (cfg.Addr
// is ignored), as `parley gateway` serves it (gateway.Server.Serve), and
// returns its base URL and a stop func that shuts it down and waits.
func ServeGateway(cfg gateway.Config, deps gateway.Deps) (baseURL string, stop func() error, err error) {
	srv, err := gateway.New(cfg, deps)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("serve gateway: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	return "http://" + ln.Addr().String(), func() error { cancel(); return <-done }, nil
}

// gatewayPoint runs conc sessions against a fresh server for cfg.Duration.
func gatewayPoint(ctx context.Context, gcfg gateway.Config, cfg GatewayConfig, gen gateway.Generator, sink gateway.EventSink, conc int) (GatewayPoint, error) {
	key, err := gateway.CreateKey(ctx, cfg.Redis, gcfg.KeyPrefix, "bench", gateway.RolePlayerClient)
	if err != nil {
		return GatewayPoint{}, err
	}
	base, stop, err := ServeGateway(gcfg, gateway.Deps{Redis: cfg.Redis, Events: sink, Engine: gen, Logger: cfg.Logger})
	if err != nil {
		return GatewayPoint{}, fmt.Errorf("bench gateway: %w", err)
	}
	defer stop() //nolint:errcheck // the point is measured
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}}
	defer hc.CloseIdleConnections()
	c := &client.Client{BaseURL: base, APIKey: key, HTTP: hc}

	// Sessions start messages until the duration is over; the messages in
	// flight then finish and count, so that slow points still measure.
	var stopLoad atomic.Bool
	timer := time.AfterFunc(cfg.Duration, func() { stopLoad.Store(true) })
	defer timer.Stop()
	var mu sync.Mutex
	var lat []float64 // ms
	errs := 0
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs++
		if firstErr == nil {
			firstErr = err
		}
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range conc {
		wg.Go(func() {
			s, err := c.CreateSession(ctx, schema.CreateSessionRequest{PlayerID: fmt.Sprintf("bench-%d", i)})
			if err != nil {
				fail(err)
				return
			}
			for n := 0; !stopLoad.Load() && ctx.Err() == nil; n++ {
				t0 := time.Now()
				_, err := c.SendMessage(ctx, s.SessionID, gatewayMessages[n%len(gatewayMessages)])
				d := time.Since(t0)
				if err != nil {
					fail(err)
					continue
				}
				mu.Lock()
				lat = append(lat, millis(d))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if ctx.Err() != nil {
		return GatewayPoint{}, ctx.Err()
	}
	if len(lat) == 0 && firstErr != nil {
		return GatewayPoint{}, fmt.Errorf("bench gateway at %d sessions: every request failed: %w", conc, firstErr)
	}
	return GatewayPoint{
		Concurrency: conc, Requests: len(lat), Errors: errs, Seconds: secs, RPS: float64(len(lat)) / secs,
		P50MS: abtest.Percentile(lat, 50), P95MS: abtest.Percentile(lat, 95), P99MS: abtest.Percentile(lat, 99),
	}, nil
}

var gatewayMessages = []string{
	"Hi! Where are we heading today?",
	"Tell me about the dragon you saw last winter.",
	"I'm hungry. Is the inn still open?",
	"What do you think of the new blacksmith?",
}
