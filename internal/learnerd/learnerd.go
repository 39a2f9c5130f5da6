// Package learnerd assembles one learner process: the learner (session
// consumer, store and user-agent refresh) and, when Redis is configured, the
// A/B watchdog that follows the session events and rolls a canary back on
// a guardrail breach (or promotes it, when enabled). `parley learner` and
// `parley dev` both run it.
package learnerd

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/parleyhq/parley/gateway/rollout"
	"github.com/parleyhq/parley/internal/telemetry"
	"github.com/parleyhq/parley/learner"
	"github.com/parleyhq/parley/learner/abtest"
)

// Config is everything one learner process needs.
type Config struct {
	Learner learner.Config
	// RedisAddr, when set, runs the A/B watchdog against the rollout state there.
	RedisAddr string
	KeyPrefix string
	Watchdog  abtest.WatchdogConfig
}

// DefaultConfig runs the learner with its defaults and no watchdog.
func DefaultConfig() Config {
	return Config{Learner: learner.DefaultConfig(), KeyPrefix: "parley:", Watchdog: abtest.DefaultWatchdogConfig()}
}

// Validate reports the first field that is unusable, naming it.
func (c Config) Validate() error {
	if err := c.Learner.Validate(); err != nil {
		return err
	}
	if c.RedisAddr != "" {
		return c.Watchdog.Validate()
	}
	return nil
}

// Run runs the learner (and the watchdog) until ctx is done.
func Run(ctx context.Context, cfg Config, tel *telemetry.Telemetry) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := tel.Logger.With("component", "learner")
	l, err := learner.New(cfg.Learner, learner.Deps{Logger: log})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	wg.Go(func() {
		if errs[0] = l.Run(ctx); errs[0] != nil {
			cancel()
		}
	})
	if cfg.RedisAddr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
		defer rdb.Close()
		rcfg := rollout.DefaultConfig()
		rcfg.Prefix = cfg.KeyPrefix
		rc, err := rollout.New(rdb, rcfg, log)
		if err != nil {
			cancel()
			wg.Wait()
			return errors.Join(err, errs[0])
		}
		collector := abtest.NewCollector()
		wd, err := abtest.NewWatchdog(cfg.Watchdog, rc, collector.Sessions, log.With("part", "watchdog"))
		if err != nil {
			cancel()
			wg.Wait()
			return errors.Join(err, errs[0])
		}
		wg.Go(func() {
			errs[1] = abtest.Follow(ctx, abtest.FollowConfig{
				Brokers: cfg.Learner.Consumer.Brokers, Topic: cfg.Learner.Consumer.Topic,
			}, collector, log)
		})
		wg.Go(func() { errs[2] = wd.Run(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("learner: %w", err)
	}
	return nil
}
