// Package devstack runs Parley's whole system in one process for development
// (`parley dev`): an embedded Kafka-protocol broker, Redis (miniredis unless an
// external Redis is given), the first NPC policy and user agent trained if the
// registry has none, the gateway, the learner and, on request, a population
// of ground-truth players playing against the gateway — all on loopback, with
// their data under one directory.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/gateway/client"
	"github.com/parleyhq/parley/internal/broker"
	"github.com/parleyhq/parley/internal/gatewayd"
	"github.com/parleyhq/parley/internal/learnerd"
	"github.com/parleyhq/parley/internal/redisconn"
	"github.com/parleyhq/parley/internal/telemetry"
	"github.com/parleyhq/parley/simulator/bots"
)

// Config says where the dev stack keeps its data and listens.
type Config struct {
	// DataDir holds the broker's log, the registry, the gateway's spool and
	// the learner's data.
	DataDir string
	// Addr is the HTTP address of the gateway (host:port).
	Addr string
	// KafkaPort is the loopback port of the embedded broker; 0 picks one.
	KafkaPort int
	// RedisAddr names an external Redis (host:port, or a comma-separated
	// list of sentinels or cluster nodes); empty starts an embedded miniredis.
	RedisAddr string
	// RedisMasterName is the primary's name at the sentinels of RedisAddr.
	RedisMasterName string
	// RedisCluster says RedisAddr names nodes of a Redis Cluster.
	RedisCluster bool
	// Bots is how many ground-truth players talk to the gateway at a time;
	// 0 runs none.
	Bots int
	// Learner runs the session consumer and the user-agent refresh.
	Learner bool
	// AnalysisGroup is the consumer group of the learner's A/B analysis
	// (learnerd.Config.AnalysisGroup).
	AnalysisGroup string
	// KeyCacheTTL, KeyCacheSize and SSEKeepAlive are the gateway's
	// (gateway.Config).
	KeyCacheTTL  time.Duration
	KeyCacheSize int
	SSEKeepAlive time.Duration
	Bootstrap    BootstrapConfig
}

// DefaultConfig keeps data in ./var and serves on 127.0.0.1:8080.
func DefaultConfig() Config {
	gc := gateway.DefaultConfig()
	return Config{DataDir: "var", Addr: "127.0.0.1:8080", Learner: true, AnalysisGroup: learnerd.DefaultConfig().AnalysisGroup,
		KeyCacheTTL: gc.KeyCacheTTL, KeyCacheSize: gc.KeyCacheSize, SSEKeepAlive: gc.SSEKeepAlive,
		Bootstrap: DefaultBootstrapConfig()}
}

// Validate reports the first field that is unusable.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("dev: data-dir is required")
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("dev: addr %q is not host:port: %w", c.Addr, err)
	}
	if c.KafkaPort < 0 || c.KafkaPort > 65535 {
		return fmt.Errorf("dev: kafka-port %d is out of range", c.KafkaPort)
	}
	if c.RedisAddr != "" {
		if err := c.redis().Validate(); err != nil {
			return fmt.Errorf("dev: %w", err)
		}
	}
	if c.Bots < 0 {
		return fmt.Errorf("dev: bots %d is negative", c.Bots)
	}
	if c.Learner && c.AnalysisGroup == "" {
		return errors.New("dev: analysis-group is required with the learner")
	}
	if err := gatewayd.ValidateKnobs(c.gatewayKnobs(gateway.DefaultConfig())); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	return c.Bootstrap.Validate()
}

// gatewayKnobs returns g with the gateway settings of c.
func (c Config) gatewayKnobs(g gateway.Config) gateway.Config {
	g.KeyCacheTTL, g.KeyCacheSize, g.SSEKeepAlive = c.KeyCacheTTL, c.KeyCacheSize, c.SSEKeepAlive
	return g
}

func (c Config) redis() redisconn.Config {
	return redisconn.Config{Addr: c.RedisAddr, MasterName: c.RedisMasterName, Cluster: c.RedisCluster}
}

// Stack is the running dev system.
type Stack struct {
	cfg Config
	tel *telemetry.Telemetry
	log *slog.Logger
	out io.Writer
}

// New checks cfg and prepares a stack; Run starts it. The URLs and keys a
// person needs are printed to out; progress and logs go to the telemetry
// logger.
func New(cfg Config, tel *telemetry.Telemetry, out io.Writer) (*Stack, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Stack{cfg: cfg, tel: tel, log: tel.Logger, out: out}, nil
}

// Run starts every part, logs where each listens, and stops them all when
// ctx is done.
func (s *Stack) Run(ctx context.Context) error {
	kafkaDir := filepath.Join(s.cfg.DataDir, "kafka")
	if err := os.MkdirAll(kafkaDir, 0o755); err != nil {
		return fmt.Errorf("dev: create data dir: %w", err)
	}
	kafka, err := broker.New(s.cfg.KafkaPort, kafkaDir)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	defer kafka.Close()
	s.log.Info("kafka broker listening", "addrs", kafka.ListenAddrs(), "data", kafkaDir)

	rc := s.cfg.redis()
	if rc.Addr == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return fmt.Errorf("dev: start embedded redis: %w", err)
		}
		defer mr.Close()
		rc.Addr = mr.Addr()
		s.log.Info("embedded redis (miniredis) listening", "addr", rc.Addr)
	} else {
		s.log.Info("using redis", "redis", rc.String())
	}

	registryDir := filepath.Join(s.cfg.DataDir, "registry")
	if err := Bootstrap(ctx, s.cfg.Bootstrap, s.cfg.DataDir, registryDir, os.Stderr, s.log); err != nil {
		if ctx.Err() != nil {
			return nil // interrupted: the next start resumes from the checkpoints
		}
		return err
	}

	gw := gatewayd.DefaultConfig()
	gw.Gateway.Addr, gw.Registry = s.cfg.Addr, registryDir
	gw.RedisAddr, gw.RedisMasterName, gw.RedisCluster = rc.Addr, rc.MasterName, rc.Cluster
	gw.DataDir, gw.Instance = filepath.Join(s.cfg.DataDir, "gateway"), "dev"
	gw.SessionLog.Brokers = kafka.ListenAddrs()
	gw.SessionLog.AllowAutoTopicCreation = true
	gw.Gateway.PlayerRate = 0 // the bots share one client; per-player limits stay on in production
	gw.Gateway = s.cfg.gatewayKnobs(gw.Gateway)

	rdb := rc.Open()
	defer rdb.Close()
	playerKey, err := gateway.CreateKey(ctx, rdb, gw.Gateway.KeyPrefix, "dev-game", gateway.RolePlayerClient)
	if err != nil {
		return fmt.Errorf("dev: create player key: %w", err)
	}
	adminKey, err := gateway.CreateKey(ctx, rdb, gw.Gateway.KeyPrefix, "dev-admin", gateway.RoleAdmin)
	if err != nil {
		return fmt.Errorf("dev: create admin key: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Go(func() { errs <- gatewayd.Run(ctx, gw, s.tel) })
	if s.cfg.Learner {
		lc := learnerd.DefaultConfig()
		lc.Learner.DataDir, lc.Learner.Registry = filepath.Join(s.cfg.DataDir, "learner"), registryDir
		lc.Learner.Consumer.Brokers = kafka.ListenAddrs()
		lc.RedisAddr, lc.RedisMasterName, lc.RedisCluster = rc.Addr, rc.MasterName, rc.Cluster
		lc.KeyPrefix, lc.Watchdog.Deployment = gw.Gateway.KeyPrefix, gw.Gateway.Deployment
		lc.AnalysisGroup = s.cfg.AnalysisGroup
		wg.Go(func() { errs <- learnerd.Run(ctx, lc, s.tel) })
	}

	base := "http://" + s.cfg.Addr
	if err := (&client.Client{BaseURL: base}).WaitReady(ctx); err != nil {
		cancel()
		wg.Wait()
		if err := drain(errs); err != nil {
			return err
		}
		return nil // stopped before the gateway was ready
	}
	fmt.Fprintf(s.out, "\nParley is up.\nchat_url=%s/v1/sessions\ndashboard_url=%s/admin/\nplayer_key=%s\nadmin_key=%s\n\n",
		base, base, playerKey, adminKey)
	if s.cfg.Bots > 0 {
		wg.Go(func() { errs <- s.runBots(ctx, base, playerKey) })
	}

	var first error
	select {
	case <-ctx.Done():
	case first = <-errs:
	}
	s.log.Info("shutting down")
	cancel()
	wg.Wait()
	return errors.Join(first, drain(errs))
}

// runBots plays rounds of ground-truth players against the gateway until
// ctx is done, logging each round's summary.
func (s *Stack) runBots(ctx context.Context, base, key string) error {
	cfg := bots.DefaultConfig()
	cfg.GatewayURL, cfg.APIKey = base, key
	cfg.Players, cfg.Concurrency, cfg.Sessions = 50, s.cfg.Bots, 4*s.cfg.Bots
	for round := uint64(1); ctx.Err() == nil; round++ {
		cfg.Seed = round
		sum, err := bots.Run(ctx, cfg, s.log.With("component", "bots"))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("dev bots: %w", err)
		}
		s.log.Info("bots round", "round", round, "sessions", sum.Sessions, "avg_l", sum.AvgL, "errors", sum.Errors)
	}
	return nil
}

// drain collects the errors already sent, ignoring nils.
func drain(errs chan error) error {
	var all []error
	for {
		select {
		case err := <-errs:
			all = append(all, err)
		default:
			return errors.Join(all...)
		}
	}
}
