package main

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/parleyhq/parley/internal/devstack"
)

func newDevCmd(g *globalFlags) *cobra.Command {
	cfg := devstack.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole system in one process on embedded defaults",
		Long: `Run the whole system in one process: an embedded Kafka-protocol broker, Redis
(an embedded miniredis unless --redis-addr or PARLEY_REDIS_ADDR names a server), the
gateway, the learner and, with --bots N, ground-truth players talking to the gateway, all
on loopback, with their data under --data-dir. If the registry has no NPC policy or user
agent yet, it first generates a corpus and trains them (cached under --data-dir; an
interrupted bootstrap resumes). It prints the chat URL, the dashboard URL and two API keys
(player_key=..., admin_key=...). Ctrl-C stops it cleanly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			tel, err := newTelemetry(cmd.Context(), g, "parley-dev")
			if err != nil {
				return err
			}
			defer tel.Shutdown(cmd.Context()) //nolint:errcheck // best effort at exit
			slog.SetDefault(tel.Logger)
			stack, err := devstack.New(cfg, tel, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return stack.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for the broker log, the registry and the learner's data")
	f.StringVar(&cfg.Addr, "addr", cfg.Addr, "HTTP address of the gateway, host:port")
	f.IntVar(&cfg.KafkaPort, "kafka-port", cfg.KafkaPort, "loopback port of the embedded Kafka broker (0 picks one)")
	redisFlags(f, &cfg.RedisAddr, &cfg.RedisMasterName, &cfg.RedisCluster, "external Redis (empty: embedded miniredis)")
	f.IntVar(&cfg.Bots, "bots", cfg.Bots, "ground-truth players talking to the gateway at a time (0: none)")
	f.BoolVar(&cfg.Learner, "learner", cfg.Learner, "run the learner (session consumer and user-agent refresh)")
	f.StringVar(&cfg.AnalysisGroup, "analysis-group", cfg.AnalysisGroup, "consumer group of the learner's A/B analysis (checkpoint: DATA_DIR/learner/abtest.json)")
	hotPathFlags(f, &cfg.KeyCacheTTL, &cfg.KeyCacheSize, &cfg.SSEKeepAlive)
	b := &cfg.Bootstrap
	f.IntVar(&b.Players, "bootstrap-players", b.Players, "personas in the bootstrap corpus")
	f.IntVar(&b.DialoguesPerPlayer, "bootstrap-dialogues", b.DialoguesPerPlayer, "bootstrap dialogues per persona")
	f.IntVar(&b.Steps, "bootstrap-steps", b.Steps, "SFT steps of the bootstrap user agent")
	f.IntVar(&b.BatchSize, "bootstrap-batch", b.BatchSize, "SFT batch size of the bootstrap user agent")
	f.IntVar(&b.NPCSteps, "bootstrap-npc-steps", b.NPCSteps, "SFT steps of the bootstrap NPC")
	f.IntVar(&b.NPCBatchSize, "bootstrap-npc-batch", b.NPCBatchSize, "SFT batch size of the bootstrap NPC")
	return cmd
}
