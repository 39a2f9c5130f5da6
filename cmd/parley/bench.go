package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/parleyhq/parley/inference"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks of the inference engine, the gateway and rollout; writes JSON",
		Long: `Benchmarks print a table and write their numbers as JSON (--out). Compare as ratios
within one run: these machines are shared and noisy.`,
	}
	cmd.AddCommand(newBenchInferenceCmd())
	return cmd
}

// backendFlags adds --backend and --plugin to f, filling b.
func backendFlags(f *pflag.FlagSet, b *inference.BackendConfig) {
	f.StringVar(&b.Name, "backend", b.Name, `numeric backend: "go" (pure Go, CPU) or "xla" (PJRT; needs --plugin)`)
	f.StringVar(&b.PluginPath, "plugin", b.PluginPath, "absolute path of the PJRT plugin for --backend xla")
}

func newBenchInferenceCmd() *cobra.Command {
	cfg := inference.DefaultBenchConfig()
	var out string
	cmd := &cobra.Command{
		Use:   "inference [--out FILE.json]",
		Short: "Decode tokens/s at several batch sizes, time to first token, prefill, FLOP/s, naive recompute",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			rep, err := inference.RunBench(cmd.Context(), cfg, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return writeJSONFile(out, rep)
		},
	}
	backendFlags(cmd.Flags(), &cfg.Backend)
	f := cmd.Flags()
	f.StringVar(&cfg.Checkpoint, "checkpoint", "", "registry version directory to benchmark (default: a random model of the default size)")
	f.IntSliceVar(&cfg.Batches, "batches", cfg.Batches, "decode batch sizes")
	f.StringSliceVar(&cfg.Decoders, "decoders", cfg.Decoders, "decode paths measured in one run (cpu, gomlx); the first gives the headline")
	f.IntVar(&cfg.DecodeTokens, "decode-tokens", cfg.DecodeTokens, "tokens generated per request")
	f.Float64Var(&cfg.SgemmFLOPS, "sgemm-flops", cfg.SgemmFLOPS, "the machine's float32 matmul ceiling (see ../shared/tools/sgemm-ceiling)")
	f.StringVar(&out, "out", "", "write the report as JSON to this file")
	return cmd
}

// writeJSONFile writes v as indented JSON to path, if path is set.
func writeJSONFile(path string, v any) error {
	if path == "" {
		return nil
	}
	_, err := writeFileWith(path, func(w io.Writer) (any, error) { return nil, printJSON(w, v) })
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fmt.Fprintln(os.Stderr, "wrote", path)
	return nil
}
