package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/gateway/sessionlog"
	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/internal/bench"
	"github.com/parleyhq/parley/internal/broker"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks of the inference engine, the gateway and rollout; writes JSON",
		Long: `Benchmarks print a table and write their numbers as JSON (--out). Compare as ratios
within one run: these machines are shared and noisy.`,
	}
	cmd.AddCommand(newBenchInferenceCmd(), newBenchTurnsCmd(), newBenchTrainCmd(), newBenchGatewayCmd(), newBenchRolloutCmd(), newBenchSoakCmd(), newBenchSummaryCmd(),
		newBenchBrokerCmd(), newBenchABCmd())
	return cmd
}

// newBenchBrokerCmd is the soak's Kafka broker in a process of its own, so
// that the soak measures the gateway's memory alone.
func newBenchBrokerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "broker",
		Short:  "An in-memory Kafka broker on loopback: prints its addresses, stops when stdin closes",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := broker.New(0, "")
			if err != nil {
				return err
			}
			defer k.Close()
			fmt.Fprintln(cmd.OutOrStdout(), strings.Join(k.ListenAddrs(), ","))
			eof := make(chan struct{})
			go func() {
				_, _ = io.Copy(io.Discard, cmd.InOrStdin())
				close(eof)
			}()
			select {
			case <-eof:
			case <-cmd.Context().Done():
			}
			return nil
		},
	}
}

func newBenchGatewayCmd() *cobra.Command {
	cfg := bench.DefaultGatewayConfig()
	var out, redisAddr, checkpoint string
	var brokerInProcess, stubOnly bool
	commitWindow := sessionlog.DefaultConfig().CommitWindow
	cmd := &cobra.Command{
		Use:   "gateway --redis-addr HOST:PORT [--out FILE.json]",
		Short: "Requests/s and latency percentiles at 1, 16 and 64 sessions; stub vs real model; Kafka logging on vs off",
		Long: `Drive a real gateway over loopback with 1, 16 and 64 concurrent sessions, with an instant
stub engine (the gateway's own overhead) and with the real model (--checkpoint, or a random
model of the default size), and with Kafka logging (a spool and an in-memory broker) on and
off. A bare JSON echo handler, driven by the same client in the same run, is the yardstick:
the report's "concurrency" rows give bare, gateway and gateway-with-logging requests/s and the
logging cost per number of sessions, by requests/s and by CPU per request. The broker runs in a
child process, as it runs beside a production gateway, and its CPU per request is reported
apart from the bench process's (--broker-in-process puts it back in the bench process).
Sessions live in the Redis at --redis-addr under a random prefix, deleted afterwards.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
			defer rdb.Close()
			if err := rdb.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("bench gateway: redis at %s: %w", redisAddr, err)
			}
			eng, stop, err := bench.StartEngine(ctx, checkpoint)
			if err != nil {
				return err
			}
			defer stop()
			brokers, stopBroker, brokerCPU, err := benchBroker(brokerInProcess)
			if err != nil {
				return err
			}
			defer stopBroker()
			lcfg := sessionlog.DefaultConfig()
			lcfg.Brokers, lcfg.SpoolDir = brokers, filepath.Join(os.TempDir(), fmt.Sprintf("parley-bench-spool-%d", os.Getpid()))
			lcfg.CommitWindow = commitWindow
			defer os.RemoveAll(lcfg.SpoolDir)
			events, err := sessionlog.New(lcfg, nil, nil, nil)
			if err != nil {
				return err
			}
			runCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			go events.Run(runCtx) //nolint:errcheck // stops with the bench
			defer events.Close()
			cfg.Redis, cfg.Events, cfg.BrokerCPU = rdb, events, brokerCPU
			if stubOnly {
				cfg.Tokenizer = eng.Tokenizer()
			} else {
				cfg.Engine = gateway.FromEngine(eng)
			}
			rep, err := bench.RunGateway(ctx, cfg, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return writeJSONFile(out, rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&redisAddr, "redis-addr", "127.0.0.1:6379", "Redis server for the bench's sessions")
	f.StringVar(&checkpoint, "checkpoint", "", "registry version directory of the real model (default: a random default-size model)")
	f.IntSliceVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "concurrent sessions measured")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "time per point")
	f.DurationVar(&commitWindow, "spool-commit-window", commitWindow, "the spool's commit window with logging on (0: every event waits for its fsync)")
	f.BoolVar(&brokerInProcess, "broker-in-process", false, "run the Kafka broker in the bench process, whose CPU then includes it")
	f.BoolVar(&stubOnly, "stub-only", false, "skip the real-model points (the engine is started only for its tokenizer)")
	f.StringVar(&out, "out", "", "write the report as JSON to this file")
	return cmd
}

// benchBroker starts the gateway bench's Kafka broker: in a child process
// (`parley bench broker`), with a func that reads its CPU time, or with
// inProcess in this one, with no such func.
func benchBroker(inProcess bool) (addrs []string, stop func(), cpu func() time.Duration, err error) {
	if inProcess {
		k, err := broker.New(0, "")
		if err != nil {
			return nil, nil, nil, err
		}
		return k.ListenAddrs(), k.Close, nil, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("bench gateway: %w", err)
	}
	k, err := bench.StartBroker([]string{self, "bench", "broker"})
	if err != nil {
		return nil, nil, nil, err
	}
	return k.Addrs, k.Stop, k.CPU, nil
}

func newBenchRolloutCmd() *cobra.Command {
	cfg := bench.DefaultRolloutConfig()
	var out, redisAddr string
	cmd := &cobra.Command{
		Use:   "rollout --redis-addr HOST:PORT [--out FILE.json]",
		Short: "Time from promote to the whole fleet serving the new version; latency during swaps vs steady",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
			defer rdb.Close()
			dir, err := os.MkdirTemp("", "parley-bench-rollout-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			cfg.WorkDir = dir
			rep, err := bench.RunRollout(cmd.Context(), cfg, rdb, nil)
			if err != nil {
				return err
			}
			if err := printJSON(cmd.OutOrStdout(), rep); err != nil {
				return err
			}
			return writeJSONFile(out, rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&redisAddr, "redis-addr", "127.0.0.1:6379", "Redis server of the rollout state")
	f.IntVar(&cfg.Gateways, "gateways", cfg.Gateways, "gateway instances following the rollout")
	f.IntVar(&cfg.Swaps, "swaps", cfg.Swaps, "canary-then-promote cycles")
	f.StringVar(&out, "out", "", "write the report as JSON to this file")
	return cmd
}

func newBenchABCmd() *cobra.Command {
	cfg := bench.DefaultABConfig()
	var out string
	cmd := &cobra.Command{
		Use:   "ab [--out FILE.json]",
		Short: "Simulated A/B experiments: A/A false positives, CI coverage, power, guardrail and SRM error rates, CUPED",
		Long: `Simulate --seeds experiments of each scenario (seeded, no network) and run the product's
analysis (abtest.Judge, abtest.Decide, abtest.SRMTest) on them look by look, every 30 simulated
seconds, carrying the sequential state as the analysis owner does. The report's keys are the
shares of seeds with each outcome; see internal/bench/ab.go for the scenarios.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := bench.RunAB(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if err := printJSON(cmd.OutOrStdout(), rep); err != nil {
				return err
			}
			return writeJSONFile(out, rep)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Seeds, "seeds", cfg.Seeds, "simulated experiments per scenario")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "random seed")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "seeds simulated in parallel")
	f.StringVar(&out, "out", "", "write the report as JSON to this file")
	return cmd
}

// runReport returns the RunE of a bench that validates *cfg, runs run with
// it and writes the report to the file *out names, if any.
func runReport[C interface{ Validate() error }, R any](cfg *C, out *string, run func(context.Context, C, io.Writer) (R, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := (*cfg).Validate(); err != nil {
			return err
		}
		rep, err := run(cmd.Context(), *cfg, cmd.OutOrStdout())
		if err != nil {
			return err
		}
		return writeJSONFile(*out, rep)
	}
}

// ceilingToolFlag adds --ceiling-tool to f, filling tool.
func ceilingToolFlag(f *pflag.FlagSet, tool *string) {
	f.StringVar(tool, "ceiling-tool", *tool, "script printing the OpenBLAS sgemm ceiling; where missing, the native gemm kernel's peak is the ceiling")
}

// backendFlags adds --backend and --plugin to f, filling b.
func backendFlags(f *pflag.FlagSet, b *inference.BackendConfig) {
	f.StringVar(&b.Name, "backend", b.Name, `numeric backend: "go" (pure Go, CPU) or "xla" (PJRT; needs --plugin)`)
	f.StringVar(&b.PluginPath, "plugin", b.PluginPath, "absolute path of the PJRT plugin for --backend xla")
}

func newBenchInferenceCmd() *cobra.Command {
	cfg := bench.DefaultInferenceConfig()
	var out string
	cmd := &cobra.Command{
		Use:   "inference [--model DIR] [--out FILE.json]",
		Short: "Decode tokens/s at several batch sizes, time to first token, prefill, FLOP/s, naive recompute",
		Args:  cobra.NoArgs,
		RunE:  runReport(&cfg, &out, bench.RunInference),
	}
	backendFlags(cmd.Flags(), &cfg.Backend)
	f := cmd.Flags()
	f.StringVar(&cfg.Checkpoint, "checkpoint", "", "registry version directory to benchmark (default: a random model of the default size)")
	f.StringVar(&cfg.HFModel, "model", "", "Hugging Face checkpoint directory to benchmark (config.json + safetensors)")
	f.StringVar((*string)(&cfg.DecodeWeights), "decode-weights", "auto", "precision of the CPU decoder's matrices: auto (bf16 for a bf16 checkpoint), f32 or bf16")
	f.IntVar(&cfg.PromptTokens, "prompt-tokens", cfg.PromptTokens, "prompt tokens per request")
	f.IntVar(&cfg.NaiveTokens, "naive-tokens", cfg.NaiveTokens, "tokens generated by full recompute for comparison (0 skips them)")
	f.IntSliceVar(&cfg.Batches, "batches", cfg.Batches, "decode batch sizes")
	f.StringSliceVar(&cfg.Decoders, "decoders", cfg.Decoders, "decode paths measured in one run (cpu, gomlx); the first gives the headline")
	f.IntVar(&cfg.DecodeTokens, "decode-tokens", cfg.DecodeTokens, "tokens generated per request")
	f.IntVar(&cfg.TrainSteps, "train-steps", cfg.TrainSteps, "GoMLX training steps timed (0 skips them; see bench train)")
	f.Float64Var(&cfg.SgemmFLOPS, "sgemm-flops", cfg.SgemmFLOPS, "the machine's float32 matmul ceiling in FLOP/s (default: measured in the run with --ceiling-tool)")
	ceilingToolFlag(f, &cfg.CeilingTool)
	f.StringVar(&out, "out", "", "write the report as JSON to this file")
	return cmd
}

func newBenchTurnsCmd() *cobra.Command {
	cfg := bench.DefaultTurnsConfig()
	var out string
	cmd := &cobra.Command{
		Use:   "turns [--checkpoint DIR] [--out FILE.json]",
		Short: "Exchange latency of concurrent conversations: prefilling every prompt whole vs keeping finished sequences",
		Long: `Players hold conversations with one engine at the same time, each turn's prompt the last one
plus the reply and the player's next line, behind a persona card they share. The same
conversations run on an engine that prefills every prompt whole and on one that keeps finished
sequences' keys and values (--prefix-cache-mb), in --rounds interleaved rounds; the report gives
the medians of each engine's exchange latency p50 and p95 and their ratios.`,
		Args: cobra.NoArgs,
		RunE: runReport(&cfg, &out, bench.RunTurns),
	}
	backendFlags(cmd.Flags(), &cfg.Backend)
	f := cmd.Flags()
	f.StringVar(&cfg.Checkpoint, "checkpoint", "", "registry version directory to serve (default: a random model of the default size)")
	f.IntSliceVar(&cfg.Players, "players", cfg.Players, "numbers of concurrent players")
	f.IntVar(&cfg.Turns, "turns", cfg.Turns, "turns per conversation")
	f.DurationVar(&cfg.Think, "think", cfg.Think, "the most a player waits between a reply and its next line")
	f.IntVar(&cfg.PrefixCacheMB, "prefix-cache-mb", cfg.PrefixCacheMB, "kept-sequence memory of the compared engine")
	f.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "interleaved rounds (the report gives medians)")
	f.StringVar(&out, "out", "", "write the report as JSON to this file")
	return cmd
}

func newBenchTrainCmd() *cobra.Command {
	cfg := bench.DefaultTrainConfig()
	var out string
	cmd := &cobra.Command{
		Use:   "train [--out FILE.json]",
		Short: "Training tokens/s, GFLOP/s and share of the sgemm ceiling: native trainer vs GoMLX at three model sizes",
		Long: `Train random models of the default size and of about 5M and 15M parameters with the native
CPU trainer and with GoMLX, in --rounds interleaved rounds, and report medians of tokens/s,
GFLOP/s and the share of the matmul ceiling measured in the same run (--ceiling-tool, or the
native gemm kernel's peak where the tool is missing), with the peak RSS while each trainer
steps. GoMLX takes tens of seconds per step at the larger sizes: it runs --gomlx-larger-steps
per round there (0 skips it).`,
		Args: cobra.NoArgs,
		RunE: runReport(&cfg, &out, bench.RunTrain),
	}
	backendFlags(cmd.Flags(), &cfg.Backend)
	f := cmd.Flags()
	f.IntVar(&cfg.Batch, "batch", cfg.Batch, "sequences per step")
	f.IntVar(&cfg.Seq, "seq", cfg.Seq, "tokens per sequence")
	f.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "interleaved rounds (the report gives medians)")
	f.IntVar(&cfg.NativeSteps, "native-steps", cfg.NativeSteps, "native trainer steps timed per round and size")
	f.IntVar(&cfg.GoMLXSteps, "gomlx-steps", cfg.GoMLXSteps, "GoMLX steps timed per round at the default size")
	f.IntVar(&cfg.GoMLXLargerSteps, "gomlx-larger-steps", cfg.GoMLXLargerSteps, "GoMLX steps timed per round at the larger sizes (0 skips them)")
	ceilingToolFlag(f, &cfg.CeilingTool)
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
