package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	// BrokerCPU, when the Kafka broker runs in a process of its own (as it
	// does beside a production gateway), reads the CPU time it has used, so
	// that the broker's CPU per request is reported apart from the bench
	// process's; nil when the broker runs in the bench process, whose CPU
	// then includes it.
	BrokerCPU func() time.Duration
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
	// Concurrency sets the gateway with the stub engine beside a bare JSON
	// echo handler driven by the same client in the same run, per number of
	// sessions: the gateway's cost as a share of what HTTP and JSON allow.
	Concurrency []ConcurrencyPoint `json:"concurrency"`
}

// ConcurrencyPoint is the stub-engine gateway, with logging off and on,
// beside the bare echo handler at one number of concurrent sessions.
type ConcurrencyPoint struct {
	Sessions          int     `json:"sessions"`
	BareRPS           float64 `json:"bare_rps"`
	GatewayRPS        float64 `json:"gateway_rps"`
	GatewayRPSLogging float64 `json:"gateway_rps_logging,omitempty"`
	// LoggingCost is the throughput logging takes: 1 − logging on ÷ off
	// (0 is free; absent without logging).
	LoggingCost float64 `json:"logging_cost,omitempty"`
	// LoggingCostCPU is logging's cost in the bench process's CPU per
	// request: 1 − off ÷ on. With the broker in a child process that is the
	// gateway's own cost (the spool, the drain and the Kafka producer, and
	// the scheduling around them); with the broker in the process it
	// includes the broker's.
	LoggingCostCPU float64 `json:"logging_cost_cpu,omitempty"`
	// LoggingCostCPUWithBroker counts the child broker's CPU per request
	// too: 1 − off ÷ (on + broker); absent with the broker in the process.
	LoggingCostCPUWithBroker float64 `json:"logging_cost_cpu_with_broker,omitempty"`
}

// GatewayPoint is one measured configuration: messages over loopback.
type GatewayPoint struct {
	Engine      string  `json:"engine"` // "bare" (the echo handler), "stub" or "model"
	Logging     bool    `json:"logging"`
	Concurrency int     `json:"concurrency"`
	Requests    int     `json:"requests"`
	Errors      int     `json:"errors"`
	Seconds     float64 `json:"seconds"`
	RPS         float64 `json:"requests_per_second"`
	P50MS       float64 `json:"p50_ms"`
	P95MS       float64 `json:"p95_ms"`
	P99MS       float64 `json:"p99_ms"`
	// CPUMSPerRequest is the bench process's CPU time (user and system:
	// the client, the server, and with logging the spool and the embedded
	// broker, not Redis) per request. Unlike requests/s it hardly moves
	// with what else the machine runs.
	CPUMSPerRequest float64 `json:"cpu_ms_per_request"`
	// BrokerCPUMSPerRequest is the CPU time of the broker in its own
	// process per request; absent with the broker in the bench process.
	BrokerCPUMSPerRequest float64 `json:"broker_cpu_ms_per_request,omitempty"`
	// RedisCPUMSPerRequest is redis-server's CPU time per request (from
	// INFO cpu, so anything else the server did in the meantime counts).
	RedisCPUMSPerRequest float64 `json:"redis_cpu_ms_per_request,omitempty"`
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
	// The bare handler and the stub gateway, logging off and on, take turns
	// at each concurrency, so that a machine whose load drifts treats them alike.
	stubRuns := []run{{"bare", nil, nil}, {"stub", stub, discardSink{}}}
	if cfg.Events != nil {
		stubRuns = append(stubRuns, run{"stub", stub, cfg.Events})
	}
	type step struct {
		run
		conc int
	}
	var steps []step
	for _, c := range cfg.Concurrency {
		for _, r := range stubRuns {
			steps = append(steps, step{r, c})
		}
	}
	if cfg.Engine != nil {
		for _, c := range cfg.Concurrency {
			steps = append(steps, step{run{"model", cfg.Engine, discardSink{}}, c})
		}
	}
	var rep GatewayReport
	fmt.Fprintf(w, "%-6s %-8s %5s %9s %7s %9s %9s %9s %9s %9s %9s\n", "engine", "logging", "conc", "req/s", "errors", "p50 ms", "p95 ms", "p99 ms", "cpu ms/r", "broker", "redis")
	for _, st := range steps {
		var p GatewayPoint
		var err error
		if st.engine == "bare" {
			p, err = barePoint(ctx, cfg, st.conc)
		} else {
			p, err = gatewayPoint(ctx, gcfg, cfg, st.gen, st.sink, st.conc)
		}
		if err != nil {
			return rep, err
		}
		p.Engine, p.Logging = st.engine, st.sink != nil && st.sink != discardSink{}
		rep.Points = append(rep.Points, p)
		fmt.Fprintf(w, "%-6s %-8v %5d %9.1f %7d %9.2f %9.2f %9.2f %9.3f %9.3f %9.3f\n", p.Engine, p.Logging, p.Concurrency, p.RPS, p.Errors, p.P50MS, p.P95MS, p.P99MS,
			p.CPUMSPerRequest, p.BrokerCPUMSPerRequest, p.RedisCPUMSPerRequest)
	}
	rep.Concurrency = concurrencyPoints(rep.Points, cfg.Concurrency)
	for _, c := range rep.Concurrency {
		withBroker := ""
		if c.LoggingCostCPUWithBroker != 0 {
			withBroker = fmt.Sprintf(", with the child broker's %.1f %%", 100*c.LoggingCostCPUWithBroker)
		}
		fmt.Fprintf(w, "%d sessions: gateway ÷ bare %.3f, logging cost %.1f %% (by the bench process's CPU %.1f %%%s)\n",
			c.Sessions, c.GatewayRPS/c.BareRPS, 100*c.LoggingCost, 100*c.LoggingCostCPU, withBroker)
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

// concurrencyPoints pairs the bare, stub and stub-with-logging points of each concurrency.
func concurrencyPoints(points []GatewayPoint, levels []int) []ConcurrencyPoint {
	var out []ConcurrencyPoint
	for _, c := range levels {
		cp := ConcurrencyPoint{Sessions: c}
		var off, on GatewayPoint
		for _, p := range points {
			switch {
			case p.Concurrency != c:
			case p.Engine == "bare":
				cp.BareRPS = p.RPS
			case p.Engine == "stub" && p.Logging:
				cp.GatewayRPSLogging, on = p.RPS, p
			case p.Engine == "stub":
				cp.GatewayRPS, off = p.RPS, p
			}
		}
		if cp.GatewayRPS > 0 && cp.GatewayRPSLogging > 0 {
			cp.LoggingCost = 1 - cp.GatewayRPSLogging/cp.GatewayRPS
		}
		if off.CPUMSPerRequest > 0 && on.CPUMSPerRequest > 0 {
			cp.LoggingCostCPU = 1 - off.CPUMSPerRequest/on.CPUMSPerRequest
			if on.BrokerCPUMSPerRequest > 0 {
				cp.LoggingCostCPUWithBroker = 1 - off.CPUMSPerRequest/(on.CPUMSPerRequest+on.BrokerCPUMSPerRequest)
			}
		}
		out = append(out, cp)
	}
	return out
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
	return drive(ctx, base, key, cfg.Duration, conc, meters(cfg))
}

// barePoint drives the bare echo handler as gatewayPoint drives a gateway.
func barePoint(ctx context.Context, cfg GatewayConfig, conc int) (GatewayPoint, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return GatewayPoint{}, fmt.Errorf("bench gateway: bare handler: %w", err)
	}
	srv := &http.Server{Handler: bareHandler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // Close ends it
	defer srv.Close()
	return drive(ctx, "http://"+ln.Addr().String(), "bare", cfg.Duration, conc, meters(cfg))
}

// bareHandler answers the two routes the bench uses as an echo: the least
// an HTTP JSON API can do (decode the body, encode a response), nothing else.
func bareHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		var req schema.CreateSessionRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(schema.CreateSessionResponse{SessionID: randomHex(16), PolicyVersion: "bare"})
	})
	turns := sync.Map{}
	mux.HandleFunc("POST /v1/sessions/{id}/messages", func(w http.ResponseWriter, r *http.Request) {
		var req schema.MessageRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n, _ := turns.LoadOrStore(r.PathValue("id"), new(atomic.Int64))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(schema.MessageResponse{Reply: req.Text, Turn: int(n.(*atomic.Int64).Add(1))})
	})
	return mux
}

// cpuMeters read the CPU time of the processes a point uses besides the
// bench's own; a nil one is not measured.
type cpuMeters struct {
	broker, redis func() time.Duration
}

func meters(cfg GatewayConfig) cpuMeters {
	return cpuMeters{broker: cfg.BrokerCPU, redis: func() time.Duration { return redisCPU(cfg.Redis) }}
}

// redisCPU is the CPU time redis-server reports in INFO cpu (user and
// system, of its main and other threads); 0 when it cannot be read.
func redisCPU(rdb redis.UniversalClient) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var secs float64
	for line := range strings.Lines(info) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			secs += f
		}
	}
	return time.Duration(secs * float64(time.Second))
}

// perRequest is CPU time d per request, in ms.
func perRequest(d time.Duration, requests int) float64 {
	return millis(d) / float64(max(1, requests))
}

// drive runs conc sessions against the player API at base for duration.
func drive(ctx context.Context, base, key string, duration time.Duration, conc int, m cpuMeters) (GatewayPoint, error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}}
	defer hc.CloseIdleConnections()
	c := &client.Client{BaseURL: base, APIKey: key, HTTP: hc}

	// Sessions start messages until the duration is over; the messages in
	// flight then finish and count, so that slow points still measure.
	var stopLoad atomic.Bool
	timer := time.AfterFunc(duration, func() { stopLoad.Store(true) })
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
	read := func(f func() time.Duration) time.Duration {
		if f == nil {
			return 0
		}
		return f()
	}
	broker0, redis0 := read(m.broker), read(m.redis)
	start, cpu0 := time.Now(), processCPU()
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
	secs, cpu := time.Since(start).Seconds(), processCPU()-cpu0
	brokerUsed, redisUsed := read(m.broker)-broker0, read(m.redis)-redis0
	if ctx.Err() != nil {
		return GatewayPoint{}, ctx.Err()
	}
	if len(lat) == 0 && firstErr != nil {
		return GatewayPoint{}, fmt.Errorf("bench gateway at %d sessions: every request failed: %w", conc, firstErr)
	}
	return GatewayPoint{
		Concurrency: conc, Requests: len(lat), Errors: errs, Seconds: secs, RPS: float64(len(lat)) / secs,
		P50MS: abtest.Percentile(lat, 50), P95MS: abtest.Percentile(lat, 95), P99MS: abtest.Percentile(lat, 99),
		CPUMSPerRequest: perRequest(cpu, len(lat)), BrokerCPUMSPerRequest: perRequest(brokerUsed, len(lat)),
		RedisCPUMSPerRequest: perRequest(redisUsed, len(lat)),
	}, nil
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var gatewayMessages = []string{
	"Hi! Where are we heading today?",
	"Tell me about the dragon you saw last winter.",
	"I'm hungry. Is the inn still open?",
	"What do you think of the new blacksmith?",
}
