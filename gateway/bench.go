package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
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

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
)

// BenchConfig says what RunBench measures.
type BenchConfig struct {
	// Redis holds the bench's sessions under a random key prefix, deleted afterwards.
	Redis *redis.Client
	// Engine is the real model; nil skips the real-model points.
	Engine Generator
	// Tokenizer splits the stub engine's reply; nil takes Engine's.
	Tokenizer *inference.Tokenizer
	// Events is the session logger measured against logging off (a sink that
	// drops events); nil skips the logging comparison.
	Events EventSink
	// Concurrency lists the numbers of concurrent sessions, such as 1, 16, 64.
	Concurrency []int
	// Duration is how long each point runs.
	Duration time.Duration
	// Gateway is the server's configuration; Addr, KeyPrefix, the rate
	// limits and MaxTurns are overridden for the bench.
	Gateway Config
	Logger  *slog.Logger
}

// DefaultBenchConfig measures 1, 16 and 64 sessions for 5 s each (plus
// the time the messages in flight at the end take).
func DefaultBenchConfig() BenchConfig {
	return BenchConfig{Concurrency: []int{1, 16, 64}, Duration: 5 * time.Second, Gateway: DefaultConfig()}
}

// Validate reports the first unusable field.
func (c BenchConfig) Validate() error {
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

// BenchReport is the outcome of RunBench, written as JSON by `parley bench gateway`.
type BenchReport struct {
	Points []BenchPoint `json:"points"`
	// Logging compares Kafka logging on with off on the stub engine, so the
	// gateway's own cost is not hidden behind the model's.
	Logging []LoggingOverhead `json:"logging,omitempty"`
}

// BenchPoint is one measured configuration: messages over loopback.
type BenchPoint struct {
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

// benchStubReply is the stub engine's canned reply (about 20 tokens).
const benchStubReply = "Hey, you're back! The road north is quiet tonight. Shall we camp by the river or push on?"

// RunBench serves a gateway on loopback and measures messages per second
// and latency percentiles at each concurrency, with the stub engine (the
// gateway's own overhead), with the real model when given, and with
// logging on and off. It prints a table to w as it goes.
func RunBench(ctx context.Context, cfg BenchConfig, w io.Writer) (BenchReport, error) {
	if err := cfg.Validate(); err != nil {
		return BenchReport{}, err
	}
	tok := cfg.Tokenizer
	if tok == nil {
		tok = cfg.Engine.Tokenizer()
	}
	maxSeq := 512
	if cfg.Engine != nil {
		maxSeq = cfg.Engine.MaxSeq()
	}
	stub := NewInstantGenerator(tok, benchStubReply, maxSeq)

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	gcfg := cfg.Gateway.clone()
	gcfg.KeyPrefix = "parley-bench-" + hex.EncodeToString(b) + ":"
	gcfg.Addr = "127.0.0.1:0"
	gcfg.ClientRate, gcfg.PlayerRate = 0, 0
	gcfg.MaxTurns = 1 << 30
	gcfg.MaxHistory = min(gcfg.MaxHistory, 8)
	defer cleanupPrefix(context.WithoutCancel(ctx), cfg.Redis, gcfg.KeyPrefix)

	type run struct {
		engine string
		gen    Generator
		sink   EventSink
	}
	var runs []run
	runs = append(runs, run{"stub", stub, discardSink{}})
	if cfg.Events != nil {
		runs = append(runs, run{"stub", stub, cfg.Events})
	}
	if cfg.Engine != nil {
		runs = append(runs, run{"model", cfg.Engine, discardSink{}})
	}
	var rep BenchReport
	fmt.Fprintf(w, "%-6s %-8s %5s %9s %7s %9s %9s %9s\n", "engine", "logging", "conc", "req/s", "errors", "p50 ms", "p95 ms", "p99 ms")
	for _, r := range runs {
		for _, c := range cfg.Concurrency {
			p, err := benchPoint(ctx, gcfg, cfg, r.gen, r.sink, c)
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
			var off, on *BenchPoint
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

// benchPoint runs conc sessions against a fresh server for cfg.Duration.
func benchPoint(ctx context.Context, gcfg Config, cfg BenchConfig, gen Generator, sink EventSink, conc int) (BenchPoint, error) {
	srv, err := New(gcfg, Deps{Redis: cfg.Redis, Events: sink, Engine: gen, Logger: cfg.Logger})
	if err != nil {
		return BenchPoint{}, err
	}
	key, err := CreateKey(ctx, cfg.Redis, gcfg.KeyPrefix, "bench", RolePlayerClient)
	if err != nil {
		return BenchPoint{}, err
	}
	ln, err := net.Listen("tcp", gcfg.Addr)
	if err != nil {
		return BenchPoint{}, fmt.Errorf("bench gateway: listen: %w", err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}}
	defer client.CloseIdleConnections()

	post := func(ctx context.Context, path string, body any, out any) error {
		j, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(j))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		rb, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode >= 300 {
			return fmt.Errorf("%s: status %d: %s", path, resp.StatusCode, rb)
		}
		return json.Unmarshal(rb, out)
	}

	// Sessions start messages until the duration is over; the messages in
	// flight then finish and count, so that slow points still measure.
	var stop atomic.Bool
	timer := time.AfterFunc(cfg.Duration, func() { stop.Store(true) })
	defer timer.Stop()
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for i := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s schema.CreateSessionResponse
			if err := post(ctx, "/v1/sessions", schema.CreateSessionRequest{PlayerID: fmt.Sprintf("bench-%d", i)}, &s); err != nil {
				mu.Lock()
				errs, firstErr = errs+1, cmpErr(firstErr, err)
				mu.Unlock()
				return
			}
			for n := 0; !stop.Load() && ctx.Err() == nil; n++ {
				t0 := time.Now()
				var m schema.MessageResponse
				err := post(ctx, "/v1/sessions/"+s.SessionID+"/messages", schema.MessageRequest{Text: benchMessages[n%len(benchMessages)]}, &m)
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					errs, firstErr = errs+1, cmpErr(firstErr, err)
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if ctx.Err() != nil {
		return BenchPoint{}, ctx.Err()
	}
	if len(lat) == 0 && firstErr != nil {
		return BenchPoint{}, fmt.Errorf("bench gateway at %d sessions: every request failed: %w", conc, firstErr)
	}
	slices.Sort(lat)
	pct := func(q float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) / 1000
	}
	return BenchPoint{
		Concurrency: conc, Requests: len(lat), Errors: errs, Seconds: secs, RPS: float64(len(lat)) / secs,
		P50MS: pct(0.50), P95MS: pct(0.95), P99MS: pct(0.99),
	}, nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

var benchMessages = []string{
	"Hi! Where are we heading today?",
	"Tell me about the dragon you saw last winter.",
	"I'm hungry. Is the inn still open?",
	"What do you think of the new blacksmith?",
}

// cleanupPrefix deletes every key under prefix.
func cleanupPrefix(ctx context.Context, rdb *redis.Client, prefix string) {
	iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		rdb.Del(ctx, keys[:n]...)
		keys = keys[n:]
	}
}
