package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/parleyhq/parley/simulator"
)

func newCorpusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "corpus",
		Short: "Generate a bootstrap corpus or import DailyDialog / JSONL dialogues",
		Long: `Corpora are JSONL files of session events (the format of parley.sessions.v1), one event
per line, each session's events together. The learner trains from them with
parley train sft --corpus FILE.`,
	}
	cmd.AddCommand(newCorpusGenCmd(), newCorpusImportCmd())
	return cmd
}

func newCorpusGenCmd() *cobra.Command {
	cfg := simulator.DefaultCorpusConfig()
	var out string
	cmd := &cobra.Command{
		Use:   "gen --out FILE.jsonl",
		Short: "Let the ground-truth population talk to a scripted NPC of mixed quality",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			stats, err := writeFileWith(out, func(w io.Writer) (any, error) {
				return simulator.GenerateCorpus(cmd.Context(), cfg, w)
			})
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), stats)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Players, "players", cfg.Players, "number of personas")
	f.IntVar(&cfg.DialoguesPerPlayer, "dialogues-per-player", cfg.DialoguesPerPlayer, "sessions per persona")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the population and the conversations")
	f.IntVar(&cfg.MaxTurns, "max-turns", cfg.MaxTurns, "exchanges before a session ends with max_turns")
	f.StringVar(&out, "out", "", "output JSONL file (required)")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

func newCorpusImportCmd() *cobra.Command {
	opts := simulator.DefaultImportOptions()
	var out string
	cmd := &cobra.Command{
		Use:   "import dailydialog|jsonl FILE --out F.jsonl",
		Short: "Convert DailyDialog (__eou__-separated) or JSONL dialogues to session events",
		Long: `Convert a corpus to session events.

  dailydialog: one dialogue per line, utterances each followed by __eou__; odd utterances
               are the player's, even ones the NPC's; consecutive dialogues are grouped into
               pseudo players of --dialogues-per-player each.
  jsonl:       session events, or {"player_id", "turns":[{"user","npc"}]} per line.

A bad line stops the import with its line number; nothing is dropped silently.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var convert func(io.Reader, io.Writer, simulator.ImportOptions) (simulator.ImportStats, error)
			switch args[0] {
			case "dailydialog":
				convert = simulator.ImportDailyDialog
			case "jsonl":
				convert = simulator.ImportJSONL
			default:
				return fmt.Errorf("corpus import: format %q is not dailydialog or jsonl", args[0])
			}
			if err := opts.Validate(); err != nil {
				return err
			}
			in, err := os.Open(args[1])
			if err != nil {
				return fmt.Errorf("corpus import: %w", err)
			}
			defer in.Close()
			stats, err := writeFileWith(out, func(w io.Writer) (any, error) { return convert(in, w, opts) })
			if err != nil {
				return fmt.Errorf("corpus import %s: %w", args[1], err)
			}
			return printJSON(cmd.OutOrStdout(), stats)
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "output JSONL file (required)")
	f.IntVar(&opts.DialoguesPerPlayer, "dialogues-per-player", opts.DialoguesPerPlayer, "consecutive dialogues grouped into one pseudo player")
	f.StringVar(&opts.PlayerPrefix, "player-prefix", opts.PlayerPrefix, "prefix of the pseudo player ids")
	f.StringVar(&opts.NPCID, "npc-id", opts.NPCID, "npc id of the imported sessions")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

// writeFileWith writes path through a temp file renamed into place only when
// write succeeds, so a failed run never leaves a half-written file.
func writeFileWith(path string, write func(io.Writer) (any, error)) (any, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".parley-*.tmp")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		return nil, err
	}
	res, err := write(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return res, os.Rename(tmp.Name(), path)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
