package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/parleyhq/parley/internal/bench"
)

func newBenchSoakCmd() *cobra.Command {
	cfg := bench.DefaultSoakConfig()
	var out string
	cmd := &cobra.Command{
		Use:   "soak --redis-addr HOST:PORT [--duration 10m] [--out FILE.json]",
		Short: "Steady load on an in-process gateway for --duration; latency percentiles and memory over time",
		Long: `Start a whole gateway process in this process (on loopback, with an embedded Kafka
broker in a child process and the Redis at --redis-addr under a random key prefix), serving the newest
"npc" model of --registry or a random model of the default size, and drive it with
--concurrency players, each playing sessions of --turns messages back to back. Every
--interval it prints the interval's requests, latency percentiles and errors, the
gateway's RSS, Go heap and goroutines and the broker's RSS; --out gets the series, the
overall numbers and the RSS growth after --warmup.
It stops after --duration or on Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("bench soak: %w", err)
			}
			cfg.BrokerCommand = []string{self, "bench", "broker"}
			rep, err := bench.RunSoak(cmd.Context(), cfg, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return writeJSONFile(out, rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.RedisAddr, "redis-addr", "", "Redis server for the gateway's sessions (required)")
	f.StringVar(&cfg.Registry, "registry", "", `model registry root holding model "npc" (default: a random default-size model)`)
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long to hold the load")
	f.DurationVar(&cfg.Interval, "interval", cfg.Interval, "time between samples")
	f.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "time before RSS growth is measured")
	f.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "players sending requests at once")
	f.IntVar(&cfg.Turns, "turns", cfg.Turns, "messages per session before it is ended")
	f.IntVar(&cfg.MaxTokens, "max-tokens", cfg.MaxTokens, "reply tokens per message")
	f.StringVar(&out, "out", "", "write the report as JSON to this file")
	_ = cmd.MarkFlagRequired("redis-addr")
	return cmd
}
