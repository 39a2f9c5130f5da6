// Package devstack runs Parley's whole system in one process for development
// (`parley dev`): an embedded Kafka-protocol broker, Redis (miniredis unless an
// external Redis is given) and the components, all on loopback, with their
// data under one directory.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/parleyhq/parley/internal/telemetry"
)

// Config says where the dev stack keeps its data and listens.
type Config struct {
	// DataDir holds the broker's log, the registry and the learner's data.
	DataDir string
	// Addr is the HTTP address of the gateway (host:port).
	Addr string
	// KafkaPort is the loopback port of the embedded broker; 0 picks one.
	KafkaPort int
	// RedisAddr names an external Redis; empty starts an embedded miniredis.
	RedisAddr string
}

// DefaultConfig keeps data in ./var and serves on 127.0.0.1:8080.
func DefaultConfig() Config {
	return Config{DataDir: "var", Addr: "127.0.0.1:8080"}
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
		if _, _, err := net.SplitHostPort(c.RedisAddr); err != nil {
			return fmt.Errorf("dev: redis addr %q is not host:port: %w", c.RedisAddr, err)
		}
	}
	return nil
}

// Stack is the running dev system.
type Stack struct {
	cfg Config
	tel *telemetry.Telemetry
	log *slog.Logger
}

// New checks cfg and prepares a stack; Run starts it.
func New(cfg Config, tel *telemetry.Telemetry) (*Stack, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Stack{cfg: cfg, tel: tel, log: tel.Logger}, nil
}

// Run starts every part, logs where each listens, and stops them all when
// ctx is done.
func (s *Stack) Run(ctx context.Context) error {
	kafkaDir := filepath.Join(s.cfg.DataDir, "kafka")
	if err := os.MkdirAll(kafkaDir, 0o755); err != nil {
		return fmt.Errorf("dev: create data dir: %w", err)
	}
	broker, err := NewBroker(s.cfg.KafkaPort, kafkaDir)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	defer broker.Close()
	s.log.Info("kafka broker listening", "addrs", broker.ListenAddrs(), "data", kafkaDir)

	redisAddr := s.cfg.RedisAddr
	if redisAddr == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return fmt.Errorf("dev: start embedded redis: %w", err)
		}
		defer mr.Close()
		redisAddr = mr.Addr()
		s.log.Info("embedded redis (miniredis) listening", "addr", redisAddr)
	} else {
		s.log.Info("using redis", "addr", redisAddr)
	}

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.tel.MetricsHandler)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("dev: listen on %s: %w", s.cfg.Addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.log.Info("http listening", "url", "http://"+ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("dev: http server: %w", err)
	}
	s.log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

// NewBroker starts an embedded Kafka-protocol broker on 127.0.0.1:port (0
// picks a free port) that keeps its log under dataDir (in memory when empty),
// fsyncs every batch, and creates topics on first use with 3 partitions.
func NewBroker(port int, dataDir string) (*kfake.Cluster, error) {
	opts := []kfake.Opt{
		kfake.NumBrokers(1), kfake.Ports(port), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3),
	}
	if dataDir != "" {
		opts = append(opts, kfake.DataDir(dataDir), kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start kafka broker on port %d: %w", port, err)
	}
	return c, nil
}
