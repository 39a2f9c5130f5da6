package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/internal/learnerd"
	"github.com/parleyhq/parley/learner"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

func newLearnerCmd(g *globalFlags) *cobra.Command {
	cfg := learnerd.DefaultConfig()
	cfg.Learner.DataDir, cfg.Learner.Registry = "var/learner", "var/registry"
	cmd := &cobra.Command{
		Use:   "learner",
		Short: "Run the learner: session consumer, user-agent refresh, AT-GRPO cycles and the A/B watchdog",
		Long: `Run the learner: a consumer group on parley.sessions.v1 rebuilds whole dialogues into a
durable store under --data-dir; every --refresh-sessions new ended sessions (or
--refresh-every) it fine-tunes the user agent on them plus a replay sample and publishes the
new version only if it is at least as faithful on held-out players. Every --cycle-sessions
(or --cycle-every) it runs --cycle-steps AT-GRPO steps from the serving policy against the
newest user agent, once that agent passes the referee gate on the serving policy's turns
(--cycle-referee; until then the cycle waits and says why), evaluates the candidate against its parent and publishes it to the
registry with its metrics and curves; promotion stays live-ops' call. With --redis-addr it
also follows the running canary experiment and rolls it back on a guardrail breach.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			tel, err := newTelemetry(cmd.Context(), g, "parley-learner")
			if err != nil {
				return err
			}
			defer tel.Shutdown(cmd.Context()) //nolint:errcheck // best effort at exit
			slog.SetDefault(tel.Logger)
			return learnerd.Run(cmd.Context(), cfg, tel)
		},
	}
	f := cmd.Flags()
	lc := &cfg.Learner
	f.StringSliceVar(&lc.Consumer.Brokers, "kafka-brokers", lc.Consumer.Brokers, "Kafka bootstrap brokers, host:port,...")
	f.StringVar(&lc.Consumer.GroupID, "group", lc.Consumer.GroupID, "consumer group of the learner")
	f.StringVar(&cfg.AnalysisGroup, "analysis-group", cfg.AnalysisGroup, "consumer group of the A/B analysis (checkpoint: DATA_DIR/abtest.json)")
	f.StringVar(&lc.DataDir, "data-dir", lc.DataDir, "session store, training runs and refresh state")
	f.StringVar(&lc.Registry, "registry", lc.Registry, "root of the model registry")
	f.BoolVar(&lc.RefreshEnabled, "refresh", lc.RefreshEnabled, "refresh the user agent from new sessions")
	f.IntVar(&lc.Refresh.EverySessions, "refresh-sessions", lc.Refresh.EverySessions, "refresh after this many new ended sessions")
	f.DurationVar(&lc.Refresh.Every, "refresh-every", lc.Refresh.Every, "refresh after this long (with enough new sessions)")
	f.BoolVar(&cfg.CycleEnabled, "cycle", cfg.CycleEnabled, "run the periodic AT-GRPO cycle that publishes candidate policies")
	f.IntVar(&cfg.Cycle.EverySessions, "cycle-sessions", cfg.Cycle.EverySessions, "run a cycle after this many new ended sessions")
	f.DurationVar(&cfg.Cycle.Every, "cycle-every", cfg.Cycle.Every, "run a cycle after this long (with enough new sessions)")
	f.IntVar(&cfg.Cycle.RL.Steps, "cycle-steps", cfg.Cycle.RL.Steps, "AT-GRPO steps per cycle")
	f.BoolVar(&cfg.CycleReferee, "cycle-referee", cfg.CycleReferee, "train only against a user agent that passes the refresh's referee gate (false: against any)")
	redisFlags(f, &cfg.RedisAddr, &cfg.RedisMasterName, &cfg.RedisCluster, "Redis of the rollout state; set to run the A/B watchdog and start cycles from the stable version")
	f.StringVar(&cfg.KeyPrefix, "key-prefix", cfg.KeyPrefix, "prefix of every Redis key")
	f.StringVar(&cfg.MetricsAddr, "metrics-addr", cfg.MetricsAddr, "serve Prometheus metrics on http://ADDR/metrics (host:port; empty: none, OTLP only)")
	f.StringVar(&cfg.Watchdog.Deployment, "deployment", cfg.Watchdog.Deployment, "deployment whose canary the watchdog follows")
	f.BoolVar(&cfg.Watchdog.Guardrails.AutoPromote, "auto-promote", cfg.Watchdog.Guardrails.AutoPromote, "promote a canary the sequential test finds better")
	return cmd
}

// readCorpusFile reads the dialogues of a corpus JSONL file.
func readCorpusFile(path string) ([]schema.Dialogue, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read corpus: %w", err)
	}
	defer f.Close()
	ds, err := simulator.ReadCorpus(f)
	if err != nil {
		return nil, fmt.Errorf("read corpus %s: %w", path, err)
	}
	return ds, nil
}

func newTrainCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train agents: SFT of the NPC policy or the user agent from a corpus",
	}
	cmd.AddCommand(newTrainSFTCmd(g))
	return cmd
}

func newTrainSFTCmd(g *globalFlags) *cobra.Command {
	var (
		role      string
		corpus    string
		sft       = learner.DefaultSFTConfig(learner.RoleNPC)
		steps     = sft.Steps
		batchSize = sft.BatchSize
	)
	cmd := &cobra.Command{
		Use:   "sft --corpus F.jsonl --role npc|user --registry DIR",
		Short: "Fine-tune the dialogue agent (npc) or the user agent (user) on a corpus and publish it",
		Long: `Fine-tune an agent on a corpus of session events (parley corpus gen|import) with AdamW and
warm-up, checkpointing every --checkpoint-every steps under --data-dir; a run interrupted
by a crash resumes from its last checkpoint when started again with the same flags. The
held-out players are evaluated before and after, and the model is published to the
registry with its metrics in the manifest. Progress on stderr shows loss, tokens/s and
ETA: a bar on a terminal, a line every few seconds when stderr is a file or a pipe.

--parent may be a Hugging Face model imported with 'parley models import' (Llama 3,
Qwen2.5, SmolLM2): it is trained in its own chat template, with the loss on the NPC's
turns and their end-of-turn token, on GoMLX's graph (--backend xla for a GPU), and the
new version carries its template, so the gateway serves it as it served the import.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := learner.Role(role)
			if err := r.Validate(); err != nil {
				return err
			}
			cfg := learner.DefaultSFTConfig(r)
			cfg.Registry, cfg.DataDir, cfg.Version, cfg.Parent = sft.Registry, sft.DataDir, sft.Version, sft.Parent
			cfg.Steps, cfg.BatchSize, cfg.Seed, cfg.CheckpointEvery = steps, batchSize, sft.Seed, sft.CheckpointEvery
			cfg.Backend, cfg.Trainer, cfg.Train.LearningRate = sft.Backend, sft.Trainer, sft.Train.LearningRate
			cfg.RunID = "sft-" + role + "-" + filepath.Base(corpus)
			cfg.Progress = cmd.ErrOrStderr()
			if err := cfg.Validate(); err != nil {
				return err
			}
			dialogues, err := readCorpusFile(corpus)
			if err != nil {
				return err
			}
			tel, err := newTelemetry(cmd.Context(), g, "parley-train")
			if err != nil {
				return err
			}
			res, err := learner.TrainSFT(cmd.Context(), cfg, dialogues, tel.Logger)
			if err != nil {
				return err
			}
			rows := []learner.MetricsRow{{Name: "before", Metrics: res.Before}, {Name: res.Model + "/" + res.Version, Metrics: res.After}}
			if err := learner.WriteMetricsTable(cmd.OutOrStdout(), rows); err != nil {
				return err
			}
			if !res.Published {
				return fmt.Errorf("train sft: %s/%s not published: %s", res.Model, res.Version, res.GateReason)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "published %s/%s to %s\n", res.Model, res.Version, cfg.Registry)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&corpus, "corpus", "", "corpus JSONL of session events (required)")
	f.StringVar(&role, "role", "", "npc (dialogue agent) or user (user agent) (required)")
	f.StringVar(&sft.Registry, "registry", "var/registry", "registry to publish to")
	f.StringVar(&sft.DataDir, "data-dir", "var/train", "directory of the run's checkpoints")
	f.StringVar(&sft.Version, "version", "", "version to publish (default: the next free vN)")
	f.StringVar(&sft.Parent, "parent", "", "version to fine-tune (default: a fresh model)")
	f.IntVar(&steps, "steps", steps, "optimizer steps")
	f.IntVar(&batchSize, "batch-size", batchSize, "dialogue instances per step")
	f.IntVar(&sft.CheckpointEvery, "checkpoint-every", sft.CheckpointEvery, "steps between checkpoints")
	f.Uint64Var(&sft.Seed, "seed", sft.Seed, "seed of the split, the initialisation and the batches")
	f.Float64Var(&sft.Train.LearningRate, "lr", sft.Train.LearningRate, "peak learning rate (fine-tuning an imported model wants far less, e.g. 1e-5)")
	backendFlags(f, &sft.Backend)
	f.StringVar(&sft.Trainer, "trainer", sft.Trainer, `"native" (CPU) or "gomlx"; empty: native on --backend go, gomlx on xla`)
	_ = cmd.MarkFlagRequired("corpus")
	_ = cmd.MarkFlagRequired("role")
	return cmd
}

func newEvalCmd() *cobra.Command {
	var (
		role, corpus, registryDir, model, version, out string
		check                                          = learner.DefaultPlayerCheckConfig()
	)
	check.Players = 0
	cmd := &cobra.Command{
		Use:   "eval --corpus F.jsonl --role npc|user --version V",
		Short: "Measure a model on the held-out players of a corpus: PPL, Dist-1/2, Avg.words, ρ",
		Long: `Measure a registry version on the held-out players of a corpus (the same split as
training): PPL, Dist-1, Dist-2, average words per turn and, for the user agent, ρ (the
Pearson correlation of simulated and real exchange lengths) and the log-loss of its
[Continue]/[Terminate] decision. Prints a Markdown table; --out also writes JSON.

With --players N (role npc) it lets the NPC talk to N held-out players of the ground-truth
population instead, sampled as the gateway serves it, and reports the share of well-formed
replies (whole words of the corpus's vocabulary in sentences of its NPC turns, a slot of up
to three words aside; no repeats; a closing mark) and the
players' mean hazard after the first reply beside the scripted generic NPC's on the same
openings, with 95 % bootstrap intervals. It also plays the messages the README types to the
NPC (its session's two, and "Hello there") --typed-runs times each and reports the share of
those replies that are well-formed, then --samples of the conversations and one play of each
typed one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := learner.Role(role)
			if err := r.Validate(); err != nil {
				return err
			}
			if model == "" {
				model = learner.DefaultSFTConfig(r).Model
			}
			dialogues, err := readCorpusFile(corpus)
			if err != nil {
				return err
			}
			reg, err := registry.NewLocal(registryDir)
			if err != nil {
				return err
			}
			if _, err := reg.Verify(cmd.Context(), model, version); err != nil {
				return err
			}
			if check.Players > 0 {
				if r != learner.RoleNPC {
					return fmt.Errorf("eval: --players measures the npc role, not %q", r)
				}
				c, err := learner.CheckNPC(cmd.Context(), reg.Dir(model, version), simulator.CorpusVocabulary(dialogues), check, nil)
				if err != nil {
					return err
				}
				if err := learner.WritePlayerCheck(cmd.OutOrStdout(), model+"/"+version, c); err != nil {
					return err
				}
				return writeJSONFile(out, c)
			}
			m, err := learner.EvaluateModel(cmd.Context(), reg.Dir(model, version), dialogues,
				learner.EvalOptionsFrom(learner.DefaultSFTConfig(r)), nil)
			if err != nil {
				return err
			}
			if err := learner.WriteMetricsTable(cmd.OutOrStdout(), []learner.MetricsRow{{Name: model + "/" + version, Metrics: m}}); err != nil {
				return err
			}
			return writeJSONFile(out, m)
		},
	}
	f := cmd.Flags()
	f.StringVar(&corpus, "corpus", "", "corpus JSONL of session events (required)")
	f.StringVar(&role, "role", "", "npc or user (required)")
	f.StringVar(&registryDir, "registry", "var/registry", "registry root")
	f.StringVar(&model, "model", "", "registry model (default: npc or user-agent by role)")
	f.StringVar(&version, "version", "", "version to measure (required)")
	f.StringVar(&out, "out", "", "also write the metrics as JSON to this file")
	f.IntVar(&check.Players, "players", check.Players, "talk to this many held-out players of the population instead (npc; 0: off)")
	f.Uint64Var(&check.PopulationSeed, "population-seed", check.PopulationSeed, "seed of the population the --players are drawn from")
	f.IntVar(&check.MaxTurns, "max-turns", check.MaxTurns, "most exchanges with each of --players")
	f.Float32Var(&check.Sampling.Temperature, "temperature", check.Sampling.Temperature, "sampling temperature of the NPC's replies (with --players)")
	f.IntVar(&check.Sampling.TopK, "top-k", check.Sampling.TopK, "top-k of the NPC's replies (with --players; 0: all)")
	f.IntVar(&check.Samples, "samples", check.Samples, "conversations to print (with --players)")
	f.IntVar(&check.TypedRuns, "typed-runs", check.TypedRuns, "plays of each of the README's typed conversations (with --players; 0: none)")
	f.Uint64Var(&check.Seed, "seed", check.Seed, "seed of the conversations, the replies and the bootstrap (with --players)")
	for _, name := range []string{"corpus", "role", "version"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
