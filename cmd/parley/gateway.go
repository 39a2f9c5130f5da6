package main

import (
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/internal/gatewayd"
)

func newGatewayCmd(g *globalFlags) *cobra.Command {
	cfg := gatewayd.DefaultConfig()
	var personas string
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the chat API gateway that game clients call",
		Long: `Run one gateway: the player chat API (and the OpenAI-compatible endpoint), sessions in
Redis, every event to Kafka through a durable spool, the policy versions of the rollout
state loaded from the registry and hot-swapped, the admin API under /admin/v1 and the
live-ops dashboard at /admin/. On first start of a deployment it serves the newest
version in the registry.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if personas != "" {
				p, err := gateway.LoadPersonas(personas)
				if err != nil {
					return err
				}
				cfg.Gateway.Personas = p
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			tel, err := newTelemetry(cmd.Context(), g, "parley-gateway")
			if err != nil {
				return err
			}
			defer tel.Shutdown(cmd.Context()) //nolint:errcheck // best effort at exit
			slog.SetDefault(tel.Logger)
			return gatewayd.Run(cmd.Context(), cfg, tel)
		},
	}
	gatewayFlags(cmd.Flags(), &cfg)
	cmd.Flags().StringVar(&personas, "personas", "", "JSON file of NPC persona cards by npc id")
	return cmd
}

// gatewayFlags binds the settings a studio changes most to flags.
func gatewayFlags(f *pflag.FlagSet, cfg *gatewayd.Config) {
	gc := &cfg.Gateway
	f.StringVar(&gc.Addr, "addr", gc.Addr, "HTTP listen address, host:port")
	redisFlags(f, &cfg.RedisAddr, &cfg.RedisMasterName, &cfg.RedisCluster, "Redis of sessions, keys and rollout state")
	f.IntVar(&gc.ReplicaAcks, "redis-replica-acks", gc.ReplicaAcks,
		"with --redis-master-name: Redis replicas (at most those connected) that must confirm a new session and each saved turn before the player is answered (WAIT), so a failover loses no acknowledged turn; 0 = answer at once")
	f.DurationVar(&gc.ReplicaAckTimeout, "redis-replica-ack-timeout", gc.ReplicaAckTimeout,
		"how long to wait for those replicas; after it the player is answered anyway and a warning logged")
	f.StringSliceVar(&cfg.SessionLog.Brokers, "kafka-brokers", cfg.SessionLog.Brokers, "Kafka bootstrap brokers, host:port,...")
	f.StringVar(&cfg.Registry, "registry", cfg.Registry, "root of the model registry")
	f.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory of the event spool and loading versions")
	f.DurationVar(&cfg.SessionLog.CommitWindow, "spool-commit-window", cfg.SessionLog.CommitWindow,
		"acknowledge an event once written and fsync those written within this window together (durable against a process crash, not a power loss); 0, the default: every event waits for the fsync it shares with concurrent ones")
	f.StringVar(&gc.Deployment, "deployment", gc.Deployment, "deployment name (rollout state and events)")
	f.StringVar(&cfg.Pool.Model, "model", cfg.Pool.Model, "registry model served")
	f.StringVar(&cfg.Instance, "instance", cfg.Instance, "this gateway's name in the fleet")
	f.StringVar(&gc.KeyPrefix, "key-prefix", gc.KeyPrefix, "prefix of every Redis key")
	f.IntVar(&cfg.Pool.MaxResident, "max-resident", cfg.Pool.MaxResident, "policy versions held in memory at once (2-3)")
	f.IntVar(&gc.MaxTurns, "max-turns", gc.MaxTurns, "exchanges before a session ends with max_turns")
	f.DurationVar(&gc.IdleTimeout, "idle-timeout", gc.IdleTimeout, "a session without a message for this long ends with idle_timeout")
	f.Float64Var(&gc.PlayerRate, "player-rate", gc.PlayerRate, "requests per second per player (token bucket; 0 = off)")
	f.IntVar(&gc.PlayerBurst, "player-burst", gc.PlayerBurst, "bucket size per player")
	f.Float64Var(&gc.ClientRate, "client-rate", gc.ClientRate, "requests per second per API client (0 = off)")
	f.IntVar(&gc.ClientBurst, "client-burst", gc.ClientBurst, "bucket size per API client")
	hotPathFlags(f, &gc.KeyCacheTTL, &gc.KeyCacheSize, &gc.SSEKeepAlive)
	backendFlags(f, &cfg.Backend)
}

// hotPathFlags binds the gateway's API key cache and SSE keep-alive, for
// the gateway and dev commands.
func hotPathFlags(f *pflag.FlagSet, keyCacheTTL *time.Duration, keyCacheSize *int, sseKeepAlive *time.Duration) {
	f.DurationVar(keyCacheTTL, "key-cache-ttl", *keyCacheTTL, "how long a gateway trusts a resolved API key; a revoked key works at most this long (0 = no cache)")
	f.IntVar(keyCacheSize, "key-cache-size", *keyCacheSize, "API keys a gateway caches at most")
	f.DurationVar(sseKeepAlive, "sse-keep-alive", *sseKeepAlive, "interval of keep-alive comments on a stream whose reply has not started (0 = none)")
}
