// Package learnerd assembles one learner process: the learner (session
// consumer, store and user-agent refresh), the periodic AT-GRPO cycle when
// enabled, and, when Redis is configured, the deployment's one A/B analysis
// (abtest.Owner): it reads the session events as its own consumer group,
// rolls a canary back on a guardrail breach, holds it on a sample ratio
// mismatch or a failed assignment audit, advances its steps or promotes it
// (when enabled), and publishes the report every gateway's dashboard shows.
// `parley learner` and `parley dev` both run it.
package learnerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/parleyhq/parley/internal/redisconn"
	"github.com/parleyhq/parley/internal/telemetry"
	"github.com/parleyhq/parley/learner"
	"github.com/parleyhq/parley/rollout"
	"github.com/parleyhq/parley/rollout/abtest"
)

// Config is everything one learner process needs.
type Config struct {
	Learner learner.Config
	// RedisAddr, when set, runs the A/B watchdog against the rollout state
	// there: host:port, or a comma-separated list of sentinels (with
	// RedisMasterName) or cluster nodes (with RedisCluster).
	RedisAddr       string
	RedisMasterName string
	RedisCluster    bool
	KeyPrefix       string
	Watchdog        abtest.WatchdogConfig
	// AnalysisGroup is the consumer group the A/B analysis reads the
	// sessions topic in; its checkpoint is DataDir/abtest.json.
	AnalysisGroup string
	// Cycle configures the periodic AT-GRPO cycle, run when CycleEnabled.
	// It starts from the rollout's stable version of Watchdog.Deployment
	// when Redis is given, else from the registry's newest version.
	Cycle        learner.CycleConfig
	CycleEnabled bool
	// CycleReferee has the cycle train only against a user agent that
	// passes the refresh's referee gate (learner.Learner.RefereeGate), as
	// the referee of RL from the serving version; off, or with the
	// referee off, it trains against any user agent.
	CycleReferee bool
	// MetricsAddr, when set, serves the process's Prometheus metrics on
	// http://MetricsAddr/metrics (the learner has no other HTTP server).
	MetricsAddr string
}

// DefaultConfig runs the learner with its defaults and no watchdog.
func DefaultConfig() Config {
	return Config{Learner: learner.DefaultConfig(), KeyPrefix: "parley:", Watchdog: abtest.DefaultWatchdogConfig(),
		AnalysisGroup: "parley-abtest", Cycle: learner.DefaultCycleConfig(), CycleEnabled: true, CycleReferee: true}
}

func (c Config) redis() redisconn.Config {
	return redisconn.Config{Addr: c.RedisAddr, MasterName: c.RedisMasterName, Cluster: c.RedisCluster}
}

// Validate reports the first field that is unusable, naming it.
func (c Config) Validate() error {
	if err := c.Learner.Validate(); err != nil {
		return err
	}
	if c.CycleEnabled {
		if c.Learner.Registry == "" {
			return errors.New("learner config: the at-grpo cycle needs a registry")
		}
		if err := c.Cycle.Validate(); err != nil {
			return err
		}
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return fmt.Errorf("learner config: metrics addr %q is not host:port: %w", c.MetricsAddr, err)
		}
	}
	if c.RedisAddr != "" {
		return errors.Join(c.redis().Validate(), c.analysis().Validate())
	}
	return nil
}

// analysis configures the A/B analysis owner.
func (c Config) analysis() abtest.OwnerConfig {
	return abtest.OwnerConfig{
		Watchdog: c.Watchdog,
		Follow: abtest.FollowConfig{Brokers: c.Learner.Consumer.Brokers, Topic: c.Learner.Consumer.Topic,
			GroupID: c.AnalysisGroup, CheckpointEvery: 5 * time.Second},
		Checkpoint:   filepath.Join(c.Learner.DataDir, "abtest.json"),
		TimelineStep: time.Minute, TimelinePoints: 120,
	}
}

// Run runs the learner (with the AT-GRPO cycle and the watchdog, when
// configured) until ctx is done.
func Run(ctx context.Context, cfg Config, tel *telemetry.Telemetry) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := tel.Logger.With("component", "learner")
	l, err := learner.New(cfg.Learner, learner.Deps{Logger: log})
	if err != nil {
		return err
	}
	meter := tel.MeterProvider.Meter("parley/learner")
	health, err := l.RegisterMetrics(meter)
	if err != nil {
		return fmt.Errorf("learner metrics: %w", err)
	}
	defer health.Unregister() //nolint:errcheck // the provider outlives the learner
	if cfg.MetricsAddr != "" {
		stop, err := serveMetrics(cfg.MetricsAddr, tel, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	wg.Go(func() {
		if errs[0] = l.Run(ctx); errs[0] != nil {
			cancel()
		}
	})
	var rc *rollout.Client
	if cfg.RedisAddr != "" {
		rdb := cfg.redis().Open()
		defer rdb.Close()
		rcfg := rollout.DefaultConfig()
		rcfg.Prefix = cfg.KeyPrefix
		if rc, err = rollout.New(rdb, rcfg, log); err != nil {
			cancel()
			wg.Wait()
			return errors.Join(err, errs[0])
		}
	}
	if cfg.CycleEnabled {
		cc := cfg.Cycle
		if cfg.CycleReferee {
			cc.Referee = l.RefereeGate()
		}
		if rc != nil {
			dep := cfg.Watchdog.Deployment
			cc.Serving = func(ctx context.Context) (string, error) {
				st, err := rc.Get(ctx, dep)
				if err != nil {
					return "", fmt.Errorf("rollout state of %s: %w", dep, err)
				}
				return st.Stable, nil
			}
		}
		cycle, err := learner.NewCycle(cc, l.Store(), cfg.Learner.Registry,
			filepath.Join(cfg.Learner.DataDir, "cycle"), log.With("part", "at-grpo cycle"))
		if err != nil {
			cancel()
			wg.Wait()
			return errors.Join(err, errs[0])
		}
		cycleHealth, err := cycle.RegisterMetrics(meter)
		if err != nil {
			cancel()
			wg.Wait()
			return errors.Join(fmt.Errorf("cycle metrics: %w", err), errs[0])
		}
		defer cycleHealth.Unregister() //nolint:errcheck // the provider outlives the cycle
		wg.Go(func() { errs[3] = cycle.Run(ctx) })
	}
	if rc != nil {
		owner, err := abtest.NewOwner(cfg.analysis(), rc, abtest.NewCollector(), log.With("part", "watchdog"))
		if err != nil {
			cancel()
			wg.Wait()
			return errors.Join(err, errs[0])
		}
		wg.Go(func() { errs[1] = owner.Run(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("learner: %w", err)
	}
	return nil
}

// serveMetrics serves tel's /metrics on addr until stop is called.
func serveMetrics(addr string, tel *telemetry.Telemetry, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("learner metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", tel.MetricsHandler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String()+"/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
