package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/gateway/client"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/internal/gatewayd"
	"github.com/parleyhq/parley/internal/telemetry"
	"github.com/parleyhq/parley/rollout/abtest"
	"github.com/parleyhq/parley/schema"
)

// SoakConfig is what one RunSoak does.
type SoakConfig struct {
	RedisAddr   string        `json:"redis_addr"`
	Registry    string        `json:"registry,omitempty"`
	Duration    time.Duration `json:"duration_ns"`
	Interval    time.Duration `json:"interval_ns"`
	Concurrency int           `json:"concurrency"`
	Turns       int           `json:"turns_per_session"`
	MaxTokens   int           `json:"max_tokens"`
	// Warmup is when RSSGrowthAfterWarmupPct starts measuring.
	Warmup time.Duration `json:"warmup_ns"`
	// BrokerCommand runs the Kafka broker in a process of its own (`parley
	// bench broker`), so that the soak process holds only the gateway and
	// its players: it prints the broker's addresses, comma-separated, as its
	// first line and stops when its stdin closes.
	BrokerCommand []string `json:"-"`
}

// SoakSample is one interval of a soak: its load, its latency and the
// process's memory at its end.
type SoakSample struct {
	ElapsedS  float64 `json:"elapsed_s"`
	Requests  int     `json:"requests"`
	Errors    int     `json:"errors"`
	ReqPerSec float64 `json:"req_per_s"`
	P50Ms     float64 `json:"p50_ms"`
	P95Ms     float64 `json:"p95_ms"`
	P99Ms     float64 `json:"p99_ms"`
	// RSSMB and HeapMB are the gateway's: the soak process holds only the
	// gateway and the players' HTTP clients.
	RSSMB       float64 `json:"rss_mb"`
	HeapMB      float64 `json:"heap_mb"`
	Goroutines  int     `json:"goroutines"`
	BrokerRSSMB float64 `json:"broker_rss_mb"`
}

// SoakReport is the JSON a soak writes.
type SoakReport struct {
	Config     SoakConfig   `json:"config"`
	Samples    []SoakSample `json:"samples"`
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
	// RSSGrowthAfterWarmupPct is the last sample's RSS over that of the
	// first sample at or after Config.Warmup, in percent (absent when the
	// soak is not longer than its warm-up).
	RSSGrowthAfterWarmupPct float64 `json:"rss_growth_after_warmup_pct,omitempty"`
}

// DefaultSoakConfig holds 8 players for 10 minutes, sampled every 30 s,
// with a 2-minute warm-up.
func DefaultSoakConfig() SoakConfig {
	return SoakConfig{Duration: 10 * time.Minute, Interval: 30 * time.Second, Concurrency: 8, Turns: 4, MaxTokens: 16,
		Warmup: 2 * time.Minute}
}

// Validate reports a configuration RunSoak cannot run.
func (c SoakConfig) Validate() error {
	if c.RedisAddr == "" {
		return errors.New("bench soak: redis-addr is required")
	}
	if c.Duration <= 0 || c.Interval <= 0 || c.Concurrency < 1 || c.Turns < 1 || c.MaxTokens < 1 || c.Warmup < 0 {
		return errors.New("bench soak: duration, interval, concurrency, turns and max-tokens must be positive, warm-up not negative")
	}
	if len(c.BrokerCommand) == 0 {
		return errors.New("bench soak: a broker command is required")
	}
	return nil
}

// RunSoak starts a whole gateway process in this one (gatewayd.Run, on
// loopback, with a Kafka broker in a child process run by
// cfg.BrokerCommand and the Redis at cfg.RedisAddr under a random key prefix), serving the newest "npc" model of
// cfg.Registry or a random model of the default size, and drives it with
// cfg.Concurrency players, each playing sessions of cfg.Turns messages back
// to back. Every cfg.Interval it prints the interval's requests, latency
// percentiles and errors, the gateway's RSS, Go heap and goroutines and the
// broker's RSS. It
// stops after cfg.Duration or when ctx is done and returns the series and
// the overall numbers.
func RunSoak(ctx context.Context, cfg SoakConfig, w io.Writer) (*SoakReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
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
	defer deletePrefix(rdb, prefix)

	gcfg := gatewayd.DefaultConfig()
	gcfg.Registry = cfg.Registry
	if gcfg.Registry == "" {
		gcfg.Registry = filepath.Join(work, "registry")
		fmt.Fprintln(w, "publishing a random default-size model…")
		if err := publishRandomModel(ctx, gcfg.Registry); err != nil {
			return nil, err
		}
	}
	kafka, err := StartBroker(cfg.BrokerCommand)
	if err != nil {
		return nil, err
	}
	defer kafka.Stop()
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("bench soak: %w", err)
	}
	gcfg.RedisAddr, gcfg.DataDir, gcfg.Instance = cfg.RedisAddr, filepath.Join(work, "gateway"), "soak"
	gcfg.SessionLog.Brokers = kafka.Addrs
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
	exited := make(chan struct{})
	var gwErr error
	go func() { gwErr = gatewayd.Run(gwCtx, gcfg, tel); close(exited) }()
	stopGateway := func() error { stopGW(); <-exited; return gwErr }

	c := &client.Client{BaseURL: "http://" + gcfg.Gateway.Addr,
		HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency}}}
	defer c.HTTP.CloseIdleConnections()
	readyCtx, cancelReady := context.WithTimeout(ctx, 3*time.Minute)
	go func() {
		select {
		case <-exited:
			cancelReady()
		case <-readyCtx.Done():
		}
	}()
	err = c.WaitReady(readyCtx)
	cancelReady()
	if err != nil {
		select {
		case <-exited:
			return nil, fmt.Errorf("bench soak: gateway exited before ready: %w", gwErr)
		default:
		}
		return nil, errors.Join(fmt.Errorf("bench soak: %w", err), stopGateway())
	}
	if c.APIKey, err = gateway.CreateKey(ctx, rdb, prefix, "soak", gateway.RolePlayerClient); err != nil {
		return nil, errors.Join(err, stopGateway())
	}

	rep := driveSoak(ctx, cfg, c, kafka.PID, w)
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
			r.kinds[errorKind(err)] = true
		}
		return
	}
	r.interval = append(r.interval, millis(d))
	r.all = append(r.all, millis(d))
}

// errorKind names an error for SoakReport.ErrorKinds: the status and code
// of a gateway's error answer, else the error's text.
func errorKind(err error) string {
	var ae *client.Error
	if errors.As(err, &ae) {
		return fmt.Sprintf("status %d %s", ae.Status, ae.Code)
	}
	return err.Error()
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
func driveSoak(ctx context.Context, cfg SoakConfig, c *client.Client, brokerPID int, w io.Writer) *SoakReport {
	loadCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	rec := &soakRecorder{kinds: map[string]bool{}}
	var wg sync.WaitGroup
	for i := range cfg.Concurrency {
		wg.Go(func() { soakPlayer(loadCtx, c, "soak-p"+strconv.Itoa(i), cfg.Turns, rec) })
	}

	rep := &SoakReport{Config: cfg}
	fmt.Fprintf(w, "%9s %9s %7s %8s %8s %8s %8s %6s %8s %8s %6s %9s\n",
		"elapsed", "eta", "reqs", "req/s", "p50_ms", "p95_ms", "p99_ms", "errs", "rss_mb", "heap_mb", "gor", "broker_mb")
	start, last := time.Now(), time.Now()
	var loadEnd time.Time
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	sample := func() {
		now := time.Now()
		lat, errs := rec.take()
		s := SoakSample{
			ElapsedS: now.Sub(start).Seconds(), Requests: len(lat), Errors: errs,
			ReqPerSec: float64(len(lat)) / now.Sub(last).Seconds(),
			P50Ms:     abtest.Percentile(lat, 50), P95Ms: abtest.Percentile(lat, 95), P99Ms: abtest.Percentile(lat, 99),
			RSSMB: procStatusMB("self", "VmRSS"), Goroutines: runtime.NumGoroutine(), BrokerRSSMB: procStatusMB(strconv.Itoa(brokerPID), "VmRSS"),
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s.HeapMB = float64(ms.HeapAlloc) / (1 << 20)
		last = now
		rep.Samples = append(rep.Samples, s)
		eta := max(cfg.Duration-now.Sub(start), 0)
		fmt.Fprintf(w, "%9s %9s %7d %8.1f %8.1f %8.1f %8.1f %6d %8.1f %8.1f %6d %9.1f\n",
			now.Sub(start).Round(time.Second), eta.Round(time.Second), s.Requests, s.ReqPerSec,
			s.P50Ms, s.P95Ms, s.P99Ms, s.Errors, s.RSSMB, s.HeapMB, s.Goroutines, s.BrokerRSSMB)
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
	rep.P50Ms, rep.P95Ms, rep.P99Ms = abtest.Percentile(rec.all, 50), abtest.Percentile(rec.all, 95), abtest.Percentile(rec.all, 99)
	for _, s := range rep.Samples {
		rep.MaxRSSMB, rep.MaxHeapMB = max(rep.MaxRSSMB, s.RSSMB), max(rep.MaxHeapMB, s.HeapMB)
	}
	if n := len(rep.Samples); n > 0 {
		last := rep.Samples[n-1]
		rep.RSSGrowthMB = last.RSSMB - rep.Samples[0].RSSMB
		for _, s := range rep.Samples[:n-1] {
			if s.ElapsedS >= cfg.Warmup.Seconds() && s.RSSMB > 0 {
				rep.RSSGrowthAfterWarmupPct = 100 * (last.RSSMB/s.RSSMB - 1)
				break
			}
		}
	}
	fmt.Fprintf(w, "total: %d requests (%.1f/s), %d errors, p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max rss %.1f MB, rss growth %+.1f MB (%+.1f %% after the %s warm-up)\n",
		rep.Requests, rep.ReqPerSec, rep.Errors, rep.P50Ms, rep.P95Ms, rep.P99Ms, rep.MaxRSSMB, rep.RSSGrowthMB,
		rep.RSSGrowthAfterWarmupPct, cfg.Warmup)
	return rep
}

// soakPlayer plays sessions of turns messages back to back until ctx is
// done, timing every request. A request cut short by the end of the run is
// not counted.
func soakPlayer(ctx context.Context, c *client.Client, player string, turns int, rec *soakRecorder) {
	timed := func(call func() error) bool {
		t0 := time.Now()
		err := call()
		if ctx.Err() != nil {
			return false
		}
		rec.add(time.Since(t0), err)
		return err == nil
	}
	for ctx.Err() == nil {
		var created schema.CreateSessionResponse
		if !timed(func() (err error) {
			created, err = c.CreateSession(ctx, schema.CreateSessionRequest{PlayerID: player})
			return err
		}) {
			continue
		}
		ended := false
		for range turns {
			var msg schema.MessageResponse
			if !timed(func() (err error) {
				msg, err = c.SendMessage(ctx, created.SessionID, "Where does the north road lead?")
				return err
			}) || msg.Ended != "" {
				ended = true
				break
			}
		}
		if !ended {
			timed(func() error { _, err := c.EndSession(ctx, created.SessionID, ""); return err })
		}
	}
}

// procStatusMB reads a memory field of /proc/PID/status (VmRSS, VmHWM...)
// of process pid ("self" for this one) in MB; 0 where there is none.
func procStatusMB(pid, field string) float64 {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// publishRandomModel puts a random default-size model, with a tokenizer
// trained on a generated corpus, into the registry at root as npc/soak.
func publishRandomModel(ctx context.Context, root string) error {
	m, tok, err := randomModel(ctx)
	if err != nil {
		return fmt.Errorf("bench soak: %w", err)
	}
	reg, err := registry.NewLocal(root)
	if err != nil {
		return fmt.Errorf("bench soak: %w", err)
	}
	if err := publish(ctx, reg, "soak", m, tok, filepath.Join(filepath.Dir(root), "checkpoint")); err != nil {
		return fmt.Errorf("bench soak: %w", err)
	}
	return nil
}
