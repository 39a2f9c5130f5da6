package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/parleyhq/parley/learner/rl/experiment"
)

func newExperimentCmd(g *globalFlags) *cobra.Command {
	cfg := experiment.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "experiment --profile medium|small|tiny --seeds N --out DIR",
		Short: "Reproduce the paper's tables: SFT, GRPO, GSPO, TreeRPO and AT-GRPO side by side",
		Long: `Train SFT-only, GRPO, GSPO, TreeRPO (L=4) and AT-GRPO from the same SFT start against the
same user agent, plus the ablations, and evaluate each on held-out ground-truth players and
the user agent. Writes DIR/results.md, DIR/results.csv and PNG charts: the analogues of the
paper's Table 3 (PPL, Dist-1, Dist-2, Avg.r, Avg.L, mean ± std over seeds), Table 5
(ablations), Table 6 (seconds per RL step, peak memory, nodes per tree beside the formula S)
and Figure 5 (Avg.r and Avg.L over steps), and results.json's acceptance object (the referee
gate before any RL, each method against SFT paired on the held-out players with bootstrap
CIs). Finished variants are kept in DIR, so an interrupted run resumes. Profiles: tiny
(minutes), small (about an hour and a half on 2 cores), medium (issue 15's RL budget: W 8,
L 6, 8 trees per step, 32 steps, 400 held-out openings; hours), paper (the paper's sizes).
With --rounds N > 1, issue 15's loop follows each seed's rows: the policy plays the population's
training players, the user agent is refreshed on the old and the new dialogues, its referee
gate is measured again, and RL runs again from the policy; every round is evaluated against
SFT only on the same held-out openings (results.json "rounds", a table in results.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			tel, err := newTelemetry(cmd.Context(), g, "parley-experiment")
			if err != nil {
				return err
			}
			cfg.Progress = cmd.ErrOrStderr()
			res, err := experiment.Run(cmd.Context(), cfg, tel.Logger)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s/results.md, results.csv and charts (%d rows)\n", cfg.OutDir, len(res.Rows))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Profile, "profile", cfg.Profile, "tiny, small, medium or paper")
	f.IntVar(&cfg.Seeds, "seeds", cfg.Seeds, "RL seeds per variant")
	f.StringVar(&cfg.OutDir, "out", cfg.OutDir, "output directory")
	f.StringSliceVar(&cfg.Only, "only", cfg.Only, "run only these variants (by name)")
	f.StringVar(&cfg.TrainOn, "train-on", cfg.TrainOn, `RL environment: "user-agent" (the method) or "players" (oracle diagnostic)`)
	f.IntVar(&cfg.Rounds, "rounds", 1, "RL rounds of the loop: after each, the policy (AT-GRPO) plays the players, the user agent is refreshed on those dialogues and RL runs again from the policy; 1 is no loop")
	f.BoolVar(&cfg.KeepUserAgent, "keep-user-agent", false, "the loop's control: later rounds train against the bootstrap user agent, without playing or refreshing")
	return cmd
}
