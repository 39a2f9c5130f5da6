// Package gatewayd assembles one gateway process from its parts: the model
// registry, the pool of resident policy versions that follows the rollout
// state in Redis, the Kafka session logger with its spool, the HTTP server,
// and the admin API with its dashboard (which shows the A/B analysis the
// learner publishes in Redis: no gateway reads the sessions topic).
// `parley gateway` and `parley dev` both run it.
package gatewayd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/gateway/admin"
	"github.com/parleyhq/parley/gateway/modelpool"
	"github.com/parleyhq/parley/gateway/sessionlog"
	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/internal/redisconn"
	"github.com/parleyhq/parley/internal/telemetry"
	"github.com/parleyhq/parley/rollout"
)

// Config is everything one gateway process needs.
type Config struct {
	Gateway    gateway.Config
	SessionLog sessionlog.Config
	Pool       modelpool.Config
	Rollout    rollout.Config
	Admin      admin.Config
	Backend    inference.BackendConfig
	Engine     inference.EngineConfig
	// RedisAddr is the Redis server, host:port; with RedisMasterName a
	// comma-separated list of sentinels, with RedisCluster of cluster nodes.
	RedisAddr string
	// RedisMasterName is the primary's name at the sentinels; empty: no Sentinel.
	RedisMasterName string
	// RedisCluster talks to a Redis Cluster.
	RedisCluster bool
	// Registry is the root of the local model registry.
	Registry string
	// DataDir holds the spool and the pool's work directory.
	DataDir string
	// Instance names this gateway in the fleet; the hostname by default.
	Instance string
	// WarmupTokens are decoded greedily before a version is served.
	WarmupTokens int
}

// DefaultConfig serves deployment "npc" from model "npc".
func DefaultConfig() Config {
	g := gateway.DefaultConfig()
	g.Deployment = "npc"
	g.ReplicaAcks = 1 // with Sentinel; complete drops it otherwise
	host, _ := os.Hostname()
	return Config{
		Gateway: g, SessionLog: sessionlog.DefaultConfig(), Pool: modelpool.DefaultConfig(),
		Rollout: rollout.DefaultConfig(), Admin: admin.DefaultConfig(),
		Backend: inference.DefaultBackendConfig(), Engine: inference.DefaultEngineConfig(),
		RedisAddr: "127.0.0.1:6379", Registry: "var/registry", DataDir: "var/gateway",
		Instance: host, WarmupTokens: 4,
	}
}

// complete fills the fields that derive from others.
func (c Config) complete() Config {
	if c.RedisMasterName == "" {
		c.Gateway.ReplicaAcks = 0 // a plain primary may have no replica to wait for; a cluster's WAIT has no node
	}
	c.SessionLog.SpoolDir = filepath.Join(c.DataDir, "spool")
	c.Pool.WorkDir = filepath.Join(c.DataDir, "pool")
	c.Rollout.Prefix = c.Gateway.KeyPrefix
	c.Admin.Deployment, c.Admin.Model = c.Gateway.Deployment, c.Pool.Model
	return c
}

func (c Config) redis() redisconn.Config {
	return redisconn.Config{Addr: c.RedisAddr, MasterName: c.RedisMasterName, Cluster: c.RedisCluster}
}

// Validate reports the first field that is unusable, naming it.
func (c Config) Validate() error {
	if c.RedisAddr == "" || c.Registry == "" || c.DataDir == "" || c.Instance == "" {
		return errors.New("gateway: redis-addr, registry, data-dir and instance are required")
	}
	if len(c.SessionLog.Brokers) == 0 {
		return errors.New("gateway: kafka-brokers is required")
	}
	if err := ValidateKnobs(c.Gateway); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	c = c.complete()
	return errors.Join(c.redis().Validate(), c.Gateway.Validate(), c.SessionLog.Validate(), c.Pool.Validate(),
		c.Rollout.Validate(), c.Admin.Validate(), c.Backend.Validate(), c.Engine.Validate())
}

// ValidateKnobs checks the gateway's hot-path settings that the gateway and
// dev commands take as flags, naming the flag of the first unusable one.
func ValidateKnobs(g gateway.Config) error {
	switch {
	case g.KeyCacheTTL < 0:
		return fmt.Errorf("key-cache-ttl %v is negative (0 turns the API key cache off)", g.KeyCacheTTL)
	case g.KeyCacheTTL > 0 && g.KeyCacheSize < 1:
		return fmt.Errorf("key-cache-size %d must be at least 1 while key-cache-ttl is on", g.KeyCacheSize)
	case g.SSEKeepAlive < 0:
		return fmt.Errorf("sse-keep-alive %v is negative (0 sends none)", g.SSEKeepAlive)
	}
	return nil
}

// Run serves until ctx is done, then stops the parts in order: the HTTP
// server finishes in-flight requests, the session logger flushes, engines close.
func Run(ctx context.Context, cfg Config, tel *telemetry.Telemetry) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.complete()
	log := tel.Logger.With("component", "gateway", "instance", cfg.Instance)

	rdb := cfg.redis().Open()
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("gateway: redis %s: %w", cfg.redis(), err)
	}
	reg, err := registry.NewLocal(cfg.Registry)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	rc, err := rollout.New(rdb, cfg.Rollout, log)
	if err != nil {
		return err
	}
	if err := initRollout(ctx, rc, reg, cfg); err != nil {
		return err
	}

	events, err := sessionlog.New(cfg.SessionLog, log, tel.MeterProvider.Meter("parley/gateway/sessionlog"), tel.Propagator)
	if err != nil {
		return err
	}
	cfg.Engine.Meter = tel.MeterProvider.Meter("parley/inference")
	pool, err := modelpool.New(cfg.Pool, reg,
		modelpool.InferenceFactory(cfg.Backend, cfg.Engine, cfg.WarmupTokens, log), log)
	if err != nil {
		_ = events.Close()
		return err
	}
	srv, err := gateway.New(cfg.Gateway, gateway.Deps{
		Redis: rdb, Events: events, Router: gateway.PoolRouter(pool), Logger: log,
		TracerProvider: tel.TracerProvider, MeterProvider: tel.MeterProvider,
		Propagator: tel.Propagator, MetricsHandler: tel.MetricsHandler,
	})
	if err != nil {
		return errors.Join(err, events.Close(), pool.Close())
	}
	api, err := admin.New(cfg.Admin, admin.Deps{
		Rollout: rc, Registry: reg, Curves: admin.LocalCurves{Registry: reg},
		Caller: gateway.Caller, Logger: log,
	})
	if err != nil {
		return errors.Join(err, events.Close(), pool.Close())
	}
	api.Register(srv.Admin())
	srv.MountPublic(api.DashboardHandler(), admin.DashboardPaths("/admin")...)

	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	background := func(name string, run func(context.Context) error) {
		wg.Go(func() {
			if err := run(bg); err != nil && bg.Err() == nil {
				log.Error(name+" stopped", "err", err)
			}
		})
	}
	background("session logger", events.Run)
	background("model pool", pool.Run)
	background("rollout watch", func(ctx context.Context) error {
		return rc.Watch(ctx, cfg.Gateway.Deployment, cfg.Instance, pool.Apply)
	})
	background("fleet heartbeat", func(ctx context.Context) error {
		return rc.RunHeartbeat(ctx, func() rollout.Instance { return pool.Status().Instance(cfg.Gateway.Deployment, cfg.Instance) })
	})

	err = srv.Run(ctx)
	// The server has finished in-flight requests: flush the events they
	// logged, then stop the rest.
	closeErr := events.Close()
	stopBG()
	wg.Wait()
	leaveCtx, cancel := context.WithTimeout(context.Background(), cfg.Rollout.FleetTTL)
	defer cancel()
	_ = rc.Leave(leaveCtx, cfg.Gateway.Deployment, cfg.Instance)
	return errors.Join(err, closeErr, pool.Close())
}

// initRollout gives the deployment its first stable version, the newest in
// the registry, when Redis holds no rollout state for it yet.
func initRollout(ctx context.Context, rc *rollout.Client, reg *registry.Local, cfg Config) error {
	dep := cfg.Gateway.Deployment
	if _, err := rc.Get(ctx, dep); err == nil {
		return nil
	} else if !errors.Is(err, rollout.ErrNotFound) {
		return fmt.Errorf("gateway: read rollout state: %w", err)
	}
	versions, err := reg.List(ctx, cfg.Pool.Model)
	if err != nil {
		return fmt.Errorf("gateway: list registry: %w", err)
	}
	if len(versions) == 0 {
		return fmt.Errorf("gateway: registry %s has no version of model %q to serve: train one with `parley train sft` (or run `parley dev`, which bootstraps one)",
			cfg.Registry, cfg.Pool.Model)
	}
	newest := versions[len(versions)-1] // List orders by creation time
	if _, err := rc.Init(ctx, dep, newest.Version, "gateway/"+cfg.Instance); err != nil && !errors.Is(err, rollout.ErrExists) {
		return fmt.Errorf("gateway: init rollout of %s: %w", dep, err)
	}
	return nil
}
