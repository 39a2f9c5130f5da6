package main

import (
	"fmt"
	"log/slog"
	"os"

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
interrupted bootstrap resumes); the user agent of the default bootstrap is shipped
trained in the binary and published as it is. It prints the chat URL, the dashboard URL and two API keys
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
	f.IntVar(&b.Players, "bootstrap-players", b.Players, "personas in the bootstrap user agent's corpus")
	f.IntVar(&b.DialoguesPerPlayer, "bootstrap-dialogues", b.DialoguesPerPlayer, "dialogues per persona in the bootstrap user agent's corpus")
	f.IntVar(&b.NPCPlayers, "bootstrap-npc-players", b.NPCPlayers, "personas in the bootstrap NPC's corpus")
	f.IntVar(&b.Steps, "bootstrap-steps", b.Steps, "SFT steps of the bootstrap user agent")
	f.IntVar(&b.BatchSize, "bootstrap-batch", b.BatchSize, "SFT batch size of the bootstrap user agent")
	f.IntVar(&b.NPCSteps, "bootstrap-npc-steps", b.NPCSteps, "SFT steps of the bootstrap NPC")
	f.IntVar(&b.NPCBatchSize, "bootstrap-npc-batch", b.NPCBatchSize, "SFT batch size of the bootstrap NPC")
	cmd.AddCommand(newDevUserAgentCmd(g))
	return cmd
}

func newDevUserAgentCmd(g *globalFlags) *cobra.Command {
	cfg := devstack.DefaultBootstrapConfig()
	var dataDir, out string
	cmd := &cobra.Command{
		Use:   "user-agent",
		Short: "Train the bootstrap's user agent and write its version directory",
		Long: `Train the user agent that parley dev's bootstrap would train (its corpus, its
SFT run and its calibration), with the default recipe unless the flags change it, and
write the published version directory to --out. This is how the user agent shipped in
the binary is made: make user-agent (about 10 minutes on 2 cores).`,
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
			if err := os.MkdirAll(dataDir, 0o755); err != nil {
				return err
			}
			if err := devstack.TrainUserAgent(cmd.Context(), cfg, dataDir, out, cmd.ErrOrStderr(), tel.Logger); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote the user agent to %s\n", out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "var", "directory for the corpus and the training run (removed when done)")
	f.StringVar(&out, "out", "", "directory to write the version to, replacing what is there (required)")
	f.IntVar(&cfg.Players, "bootstrap-players", cfg.Players, "personas in the corpus")
	f.IntVar(&cfg.DialoguesPerPlayer, "bootstrap-dialogues", cfg.DialoguesPerPlayer, "dialogues per persona")
	f.IntVar(&cfg.Steps, "bootstrap-steps", cfg.Steps, "SFT steps")
	f.IntVar(&cfg.BatchSize, "bootstrap-batch", cfg.BatchSize, "SFT batch size")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}
