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
(an embedded miniredis unless --redis-addr or PARLEY_REDIS_ADDR names a server) and the
components, all on loopback, with their data under --data-dir. Ctrl-C stops it cleanly.`,
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
			stack, err := devstack.New(cfg, tel)
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
	f.StringVar(&cfg.RedisAddr, "redis-addr", cfg.RedisAddr, "external Redis host:port (empty: embedded miniredis)")
	return cmd
}
