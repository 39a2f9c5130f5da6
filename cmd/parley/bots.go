package main

import (
	"github.com/parleyhq/parley/simulator/bots"
	"github.com/spf13/cobra"
)

func newBotsCmd(g *globalFlags) *cobra.Command {
	cfg := bots.DefaultConfig()
	var out string
	cmd := &cobra.Command{
		Use:   "bots --gateway URL --api-key KEY",
		Short: "Play ground-truth player personas against a running gateway over HTTP",
		Long: `Play seeded ground-truth personas against a running gateway over its player API and print
a summary: sessions, Avg.L (exchanges per session), Avg.L per arm and per policy version,
end reasons and errors. With --out the summary is also written as JSON.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			tel, err := newTelemetry(cmd.Context(), g, "parley-bots")
			if err != nil {
				return err
			}
			sum, err := bots.Run(cmd.Context(), cfg, tel.Logger)
			if err != nil {
				return err
			}
			if err := sum.WriteTable(cmd.OutOrStdout()); err != nil {
				return err
			}
			return writeJSONFile(out, sum)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.GatewayURL, "gateway", cfg.GatewayURL, "base URL of the gateway")
	f.StringVar(&cfg.APIKey, "api-key", "", "API key of a player-client (or PARLEY_API_KEY)")
	f.IntVar(&cfg.Players, "players", cfg.Players, "number of personas")
	f.IntVar(&cfg.Sessions, "sessions", cfg.Sessions, "sessions in all")
	f.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "sessions at a time")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the population and the conversations")
	f.DurationVar(&cfg.ThinkTime, "think-time", cfg.ThinkTime, "pause before each message after the first, as a player reads and types (0: answer at once)")
	f.IntVar(&cfg.MaxTurns, "max-turns", cfg.MaxTurns, "end a session from the client side after this many exchanges (0: the gateway's limit)")
	f.StringVar(&cfg.NPCID, "npc", cfg.NPCID, "npc id to talk to (empty: the gateway's default)")
	f.StringVar(&out, "out", "", "also write the summary as JSON to this file")
	return cmd
}
