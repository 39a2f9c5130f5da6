package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/parleyhq/parley/internal/bench"
)

func newBenchSummaryCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "summary [DIR]",
		Short: "One table of the headline numbers of the bench JSON files in DIR (default bench/results)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "bench/results"
			if len(args) == 1 {
				dir = args[0]
			}
			return writeBenchSummary(cmd.OutOrStdout(), dir)
		},
	}
}

// writeBenchSummary prints one row per headline number of each bench
// report present in dir; missing reports are skipped.
func writeBenchSummary(w io.Writer, dir string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "bench\tmeasure\tvalue")
	var found int
	var inf bench.InferenceReport
	if ok, err := readReport(dir, "inference.json", &inf); err != nil {
		return err
	} else if ok {
		found++
		fmt.Fprintf(tw, "inference\tprefill tokens/s (%s)\t%.0f\n", inf.Decoder, inf.PrefillTokensPerSec)
		for _, d := range inf.Decode {
			fmt.Fprintf(tw, "inference\tdecode tokens/s, batch %d\t%.0f (%.1f %% of sgemm)\n", d.Batch, d.TokensPerSec, 100*d.Fraction)
		}
		fmt.Fprintf(tw, "inference\tbatch-32 / batch-1\t%.1f×\n", inf.Batch32Speedup)
	}
	var turns bench.TurnsReport
	if ok, err := readReport(dir, "turns.json", &turns); err != nil {
		return err
	} else if ok {
		found++
		for _, p := range turns.Points {
			fmt.Fprintf(tw, "turns\t%d players: exchange p95 whole prompts / kept prefixes\t%.0f / %.0f ms (%.2f×)\n",
				p.Players, p.Whole.Latency.P95, p.Kept.Latency.P95, p.P95Ratio)
		}
	}
	var tr bench.TrainReport
	if ok, err := readReport(dir, "train.json", &tr); err != nil {
		return err
	} else if ok {
		found++
		fmt.Fprintf(tw, "train	matmul ceiling (%s)	%.0f GFLOP/s\n", tr.CeilingSource, tr.CeilingGFLOPS)
		for _, s := range tr.Sizes {
			fmt.Fprintf(tw, "train	%.1fM params: native / GoMLX tokens/s	%.0f / %.0f (%.1f %% / %.1f %% of ceiling), peak RSS %.0f MB\n",
				float64(s.Params)/1e6, s.NativeTokensPerSec, s.GoMLXTokensPerSec, 100*s.NativeShareOfCeiling, 100*s.GoMLXShareOfCeiling, s.PeakRSSMB)
		}
	}
	var gw bench.GatewayReport
	if ok, err := readReport(dir, "gateway.json", &gw); err != nil {
		return err
	} else if ok {
		found++
		for _, p := range gw.Points {
			fmt.Fprintf(tw, "gateway\t%s, logging %v, %d sessions\t%.0f req/s, p50 %.1f ms, p99 %.1f ms\n",
				p.Engine, p.Logging, p.Concurrency, p.RPS, p.P50MS, p.P99MS)
		}
		for _, c := range gw.Concurrency {
			fmt.Fprintf(tw, "gateway	%d sessions: gateway ÷ bare, logging cost	%.2f, %.1f %%\n",
				c.Sessions, c.GatewayRPS/c.BareRPS, 100*c.LoggingCost)
		}
	}
	var ro bench.RolloutReport
	if ok, err := readReport(dir, "rollout.json", &ro); err != nil {
		return err
	} else if ok {
		found++
		fmt.Fprintf(tw, "rollout\tpromote → fleet serving, p50 / max\t%.0f / %.0f ms\n", ro.PromoteMS.P50, ro.PromoteMS.Max)
		fmt.Fprintf(tw, "rollout\trequest p95 steady / during swaps\t%.0f / %.0f ms\n", ro.SteadyLatencyMS.P95, ro.SwapLatencyMS.P95)
		fmt.Fprintf(tw, "rollout\tfailed requests\t%d of %d\n", ro.Failed, ro.Requests)
	}
	var soak bench.SoakReport
	if ok, err := readReport(dir, "soak.json", &soak); err != nil {
		return err
	} else if ok {
		found++
		fmt.Fprintf(tw, "soak\treq/s, p50 / p95 / p99\t%.1f, %.0f / %.0f / %.0f ms\n", soak.ReqPerSec, soak.P50Ms, soak.P95Ms, soak.P99Ms)
		fmt.Fprintf(tw, "soak\tmax RSS, RSS growth, errors\t%.0f MB, %+.1f MB, %d\n", soak.MaxRSSMB, soak.RSSGrowthMB, soak.Errors)
	}
	var ab bench.ABReport
	if ok, err := readReport(dir, "ab.json", &ab); err != nil {
		return err
	} else if ok {
		found++
		fmt.Fprintf(tw, "ab\tA/A false positives, player / session level\t%.3f / %.3f\n", ab.AAFalsePositiveRate, ab.AAFalsePositiveRateSessionLevel)
		fmt.Fprintf(tw, "ab\tCI coverage, power (+0.5 turns)\t%.3f, %.3f\n", ab.CICoverage, ab.Power)
		fmt.Fprintf(tw, "ab\tguardrail false rollbacks, detection in 30 min\t%.3f, %.3f\n", ab.GuardrailFalseRollbackRate, ab.GuardrailDetectionRate)
		fmt.Fprintf(tw, "ab\tSRM false alarms, detection\t%.4f, %.3f\n", ab.SRMFalseAlarmRate, ab.SRMDetectionRate)
		fmt.Fprintf(tw, "ab\tCUPED variance ratio\t%.3f\n", ab.CUPEDVarianceRatio)
	}
	if found == 0 {
		return fmt.Errorf("bench summary: no bench reports in %s", dir)
	}
	return tw.Flush()
}

// readReport decodes dir/name into v; a missing file reports false.
func readReport(dir, name string, v any) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("bench summary %s: %w", name, err)
	}
	return true, nil
}
