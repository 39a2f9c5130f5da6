package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/internal/broker"
	"github.com/parleyhq/parley/internal/gatewayd"
	"github.com/parleyhq/parley/internal/telemetry"
	"github.com/parleyhq/parley/schema"
)

// soakConfig is what one soak run does.
type soakConfig struct {
	RedisAddr   string        `json:"redis_addr"`
	Registry    string        `json:"registry,omitempty"`
	Duration    time.Duration `json:"duration_ns"`
	Interval    time.Duration `json:"interval_ns"`
	Concurrency int           `json:"concurrency"`
	Turns       int           `json:"turns_per_session"`
	MaxTokens   int           `json:"max_tokens"`
}

// soakSample is one interval of a soak: its load, its latency and the
// process's memory at its end.
type soakSample struct {
	ElapsedS   float64 `json:"elapsed_s"`
	Requests   int     `json:"requests"`
	Errors     int     `json:"errors"`
	ReqPerSec  float64 `json:"req_per_s"`
	P50Ms      float64 `json:"p50_ms"`
	P95Ms      float64 `json:"p95_ms"`
	P99Ms      float64 `json:"p99_ms"`
	RSSMB      float64 `json:"rss_mb"`
	HeapMB     float64 `json:"heap_mb"`
	Goroutines int     `json:"goroutines"`
}

// soakReport is the JSON a soak writes.
type soakReport struct {
	Config     soakConfig   `json:"config"`
	Samples    []soakSample `json:"samples"`
	Requests   int          `json:"requests"`
	Errors     int          `json:"errors"`
	ErrorKinds []string     `json:"error_kinds,omitempty"`
	ReqPerSec  float64      `json:"req_per_s"`
	P50Ms      float64      `json:"p50_ms"`
	P95Ms      float64      `json:"p95_ms"`
	P99Ms      float64      `json:"p99_ms"`
	MaxRSSMB   float64      `json:"max_rss_mb"`
	MaxHeapMB  float64      `json:"max_heap_mb"`
	// RSSGrowthMB is the last sample's RSS less the first's: a leak shows here.
	RSSGrowthMB float64 `json:"rss_growth_mb"`
}

func newBenchSoakCmd() *cobra.Command {
	cfg := soakConfig{Duration: 10 * time.Minute, Interval: 30 * time.Second, Concurrency: 8, Turns: 4, MaxTokens: 16}
	var out string
	cmd := &cobra.Command{
		Use:   "soak --redis-addr HOST:PORT [--duration 10m] [--out FILE.json]",
		Short: "Steady load on an in-process gateway for --duration; latency percentiles and memory over time",
		Long: `Start a whole gateway process in this process (on loopback, with an embedded Kafka
broker and the Redis at --redis-addr under a random key prefix), serving the newest
"npc" model of --registry or a random model of the default size, and drive it with
--concurrency players, each playing sessions of --turns messages back to back. Every
--interval it prints the interval's requests, latency percentiles and errors and the
process's RSS, Go heap and goroutines; --out gets the series and the overall numbers.
It stops after --duration or on Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Duration <= 0 || cfg.Interval <= 0 || cfg.Concurrency < 1 || cfg.Turns < 1 || cfg.MaxTokens < 1 {
				return errors.New("bench soak: duration, interval, concurrency, turns and max-tokens must be positive")
			}
			rep, err := runSoak(cmd.Context(), cfg, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return writeJSONFile(out, rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.RedisAddr, "redis-addr", "", "Redis server for the gateway's sessions (required)")
	f.StringVar(&cfg.Registry, "registry", "", `model registry root holding model "npc" (default: a random default-size model)`)
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long to hold the load")
	f.DurationVar(&cfg.Interval, "interval", cfg.Interval, "time between samples")
	f.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "players sending requests at once")
	f.IntVar(&cfg.Turns, "turns", cfg.Turns, "messages per session before it is ended")
	f.IntVar(&cfg.MaxTokens, "max-tokens", cfg.MaxTokens, "reply tokens per message")
	f.StringVar(&out, "out", "", "write the report as JSON to this file")
	_ = cmd.MarkFlagRequired("redis-addr")
	return cmd
}

// runSoak starts the gateway, holds the load and returns the report.
func runSoak(ctx context.Context, cfg soakConfig, w io.Writer) (*soakReport, error) {
	work, err := os.MkdirTemp("", "parley-soak-")
	if err != nil {
		return nil, fmt.Errorf("bench soak: %w", err)
	}
	defer os.RemoveAll(work)

	rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("bench soak: redis at %s: %w", cfg.RedisAddr, err)
	}
	prefix := "parley-soak-" + randomHex(4) + ":"
	defer deleteKeys(rdb, prefix)

	gcfg := gatewayd.DefaultConfig()
	gcfg.Registry = cfg.Registry
	if gcfg.Registry == "" {
		gcfg.Registry = filepath.Join(work, "registry")
		fmt.Fprintln(w, "publishing a random default-size model…")
		if err := publishRandomModel(ctx, gcfg.Registry); err != nil {
			return nil, err
		}
	}
	kafka, err := broker.New(0, "")
	if err != nil {
		return nil, fmt.Errorf("bench soak: broker: %w", err)
	}
	defer kafka.Close()
	port, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	gcfg.RedisAddr, gcfg.DataDir, gcfg.Instance = cfg.RedisAddr, filepath.Join(work, "gateway"), "soak"
	gcfg.SessionLog.Brokers = kafka.ListenAddrs()
	gcfg.Gateway.Addr = "127.0.0.1:" + strconv.Itoa(port)
	gcfg.Gateway.KeyPrefix = prefix
	gcfg.Gateway.Sampling.MaxTokens = cfg.MaxTokens
	gcfg.Gateway.ClientRate, gcfg.Gateway.PlayerRate = 0, 0 // measure serving, not the limits

	tel, err := telemetry.New(ctx, telemetry.DefaultConfig(), io.Discard)
	if err != nil {
		return nil, err
	}
	defer tel.Shutdown(context.Background()) //nolint:errcheck // nothing exported
	gwCtx, stopGW := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gatewayd.Run(gwCtx, gcfg, tel) }()
	stopGateway := func() error { stopGW(); return <-done }

	base := "http://" + gcfg.Gateway.Addr
	if err := waitHTTPReady(ctx, base+"/readyz", done, 3*time.Minute); err != nil {
		stopGW()
		return nil, err
	}
	key, err := gateway.CreateKey(ctx, rdb, prefix, "soak", gateway.RolePlayerClient)
	if err != nil {
		return nil, errors.Join(err, stopGateway())
	}

	rep := driveSoak(ctx, cfg, base, key, w)
	if err := stopGateway(); err != nil {
		return rep, fmt.Errorf("bench soak: gateway: %w", err)
	}
	return rep, nil
}

// soakRecorder collects request latencies and errors from the players.
type soakRecorder struct {
	mu       sync.Mutex
	interval []float64 // ms, this interval
	all      []float64 // ms, the whole run
	errs     int
	allErrs  int
	kinds    map[string]bool
}

func (r *soakRecorder) add(d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs++
		r.allErrs++
		if len(r.kinds) < 20 {
			r.kinds[err.Error()] = true
		}
		return
	}
	ms := float64(d.Microseconds()) / 1000
	r.interval = append(r.interval, ms)
	r.all = append(r.all, ms)
}

// take returns this interval's latencies and errors and starts the next.
func (r *soakRecorder) take() ([]float64, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	lat, errs := r.interval, r.errs
	r.interval, r.errs = nil, 0
	return lat, errs
}

// driveSoak runs the players until the duration is over or ctx is done,
// sampling every interval.
func driveSoak(ctx context.Context, cfg soakConfig, base, key string, w io.Writer) *soakReport {
	loadCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	rec := &soakRecorder{kinds: map[string]bool{}}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	for i := range cfg.Concurrency {
		wg.Go(func() { soakPlayer(loadCtx, client, base, key, "soak-p"+strconv.Itoa(i), cfg.Turns, rec) })
	}

	rep := &soakReport{Config: cfg}
	fmt.Fprintf(w, "%9s %9s %7s %8s %8s %8s %8s %6s %8s %8s %6s\n",
		"elapsed", "eta", "reqs", "req/s", "p50_ms", "p95_ms", "p99_ms", "errs", "rss_mb", "heap_mb", "gor")
	start, last := time.Now(), time.Now()
	var loadEnd time.Time
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	sample := func() {
		now := time.Now()
		lat, errs := rec.take()
		s := soakSample{
			ElapsedS: now.Sub(start).Seconds(), Requests: len(lat), Errors: errs,
			ReqPerSec: float64(len(lat)) / now.Sub(last).Seconds(),
			P50Ms:     quantile(lat, 0.50), P95Ms: quantile(lat, 0.95), P99Ms: quantile(lat, 0.99),
			RSSMB: rssMB(), Goroutines: runtime.NumGoroutine(),
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s.HeapMB = float64(ms.HeapAlloc) / (1 << 20)
		last = now
		rep.Samples = append(rep.Samples, s)
		eta := max(cfg.Duration-now.Sub(start), 0)
		fmt.Fprintf(w, "%9s %9s %7d %8.1f %8.1f %8.1f %8.1f %6d %8.1f %8.1f %6d\n",
			now.Sub(start).Round(time.Second), eta.Round(time.Second), s.Requests, s.ReqPerSec,
			s.P50Ms, s.P95Ms, s.P99Ms, s.Errors, s.RSSMB, s.HeapMB, s.Goroutines)
	}
loop:
	for {
		select {
		case <-loadCtx.Done():
			loadEnd = time.Now()
			break loop
		case <-tick.C:
			sample()
		}
	}
	wg.Wait()
	if loadEnd.Sub(last) > cfg.Interval/10 {
		sample() // the partial last interval
	}

	total := time.Since(start).Seconds()
	rep.Requests, rep.Errors = len(rec.all), rec.allErrs
	for k := range rec.kinds {
		rep.ErrorKinds = append(rep.ErrorKinds, k)
	}
	slices.Sort(rep.ErrorKinds)
	rep.ReqPerSec = float64(rep.Requests) / total
	rep.P50Ms, rep.P95Ms, rep.P99Ms = quantile(rec.all, 0.50), quantile(rec.all, 0.95), quantile(rec.all, 0.99)
	for _, s := range rep.Samples {
		rep.MaxRSSMB, rep.MaxHeapMB = max(rep.MaxRSSMB, s.RSSMB), max(rep.MaxHeapMB, s.HeapMB)
	}
	if n := len(rep.Samples); n > 0 {
		rep.RSSGrowthMB = rep.Samples[n-1].RSSMB - rep.Samples[0].RSSMB
	}
	fmt.Fprintf(w, "total: %d requests (%.1f/s), %d errors, p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max rss %.1f MB, rss growth %+.1f MB\n",
		rep.Requests, rep.ReqPerSec, rep.Errors, rep.P50Ms, rep.P95Ms, rep.P99Ms, rep.MaxRSSMB, rep.RSSGrowthMB)
	return rep
}

// soakPlayer plays sessions of turns messages back to back until ctx is
// done, timing every request. A request cut short by the end of the run is
// not counted.
func soakPlayer(ctx context.Context, client *http.Client, base, key, player string, turns int, rec *soakRecorder) {
	post := func(path string, body, out any) bool {
		t0 := time.Now()
		err := postJSON(ctx, client, base+path, key, body, out)
		if ctx.Err() != nil {
			return false
		}
		rec.add(time.Since(t0), err)
		return err == nil
	}
	for ctx.Err() == nil {
		var created schema.CreateSessionResponse
		if !post("/v1/sessions", schema.CreateSessionRequest{PlayerID: player}, &created) {
			continue
		}
		path := "/v1/sessions/" + url.PathEscape(created.SessionID)
		ended := false
		for range turns {
			var msg schema.MessageResponse
			if !post(path+"/messages", schema.MessageRequest{Text: "Where does the north road lead?"}, &msg) {
				ended = true
				break
			}
			if msg.Ended != "" {
				ended = true
				break
			}
		}
		if !ended {
			post(path+"/end", struct{}{}, nil)
		}
	}
}

// postJSON POSTs body and decodes a 2xx answer into out (when not nil).
func postJSON(ctx context.Context, client *http.Client, u, key string, body, out any) error {
	payload, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("post: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	if out != nil && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode answer: %w", err)
		}
	}
	return nil
}

// quantile returns the q-th quantile of xs (nearest rank), 0 when empty.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s)) + 0.5)
	return s[min(max(i-1, 0), len(s)-1)]
}

// rssMB reads this process's resident set size from /proc; 0 where there is none.
func rssMB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// publishRandomModel puts a random default-size model, with a tokenizer
// trained on a generated corpus, into the registry at root as npc/soak.
func publishRandomModel(ctx context.Context, root string) error {
	tok, err := benchTokenizer(ctx)
	if err != nil {
		return fmt.Errorf("bench soak: tokenizer: %w", err)
	}
	mc := inference.DefaultModelConfig()
	mc.VocabSize = tok.VocabSize()
	m, err := inference.NewModel(mc, inference.DefaultBackendConfig(), 1)
	if err != nil {
		return fmt.Errorf("bench soak: model: %w", err)
	}
	dir := filepath.Join(filepath.Dir(root), "checkpoint")
	if err := inference.SaveCheckpoint(dir, m, tok, schema.Manifest{Model: "npc", Version: "soak", Algorithm: "random-init"}); err != nil {
		return fmt.Errorf("bench soak: save checkpoint: %w", err)
	}
	reg, err := registry.NewLocal(root)
	if err != nil {
		return fmt.Errorf("bench soak: %w", err)
	}
	if _, err := reg.Publish(ctx, "npc", "soak", dir); err != nil {
		return fmt.Errorf("bench soak: publish: %w", err)
	}
	return nil
}

// waitHTTPReady polls url until it answers 200, the gateway exits, or timeout.
func waitHTTPReady(ctx context.Context, u string, done <-chan error, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			return fmt.Errorf("bench soak: gateway exited before ready: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := http.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("bench soak: %s not ready within %s", u, timeout)
}

func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("bench soak: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// deleteKeys removes the soak's keys from Redis.
func deleteKeys(rdb *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for chunk := range slices.Chunk(keys, 500) {
		_ = rdb.Del(ctx, chunk...).Err()
	}
}
