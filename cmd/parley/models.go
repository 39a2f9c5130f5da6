package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/schema"
)

func newModelsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "models",
		Short: "Bring open-weight models into the registry",
	}
	cmd.AddCommand(newModelsImportCmd())
	return cmd
}

func newModelsImportCmd() *cobra.Command {
	var registryDir, name, version string
	cmd := &cobra.Command{
		Use:   "import DIR --name npc",
		Short: "Publish a Hugging Face checkpoint directory (Llama 3, Qwen2.5, SmolLM2) as a registry version",
		Long: `Check a local Hugging Face checkpoint directory — config.json, tokenizer.json and
safetensors weights (bf16, f16 or f32, one file or shards with model.safetensors.index.json)
— and publish it to the registry as the next version of --name (or --version), with the
sha256 of every file in its manifest. Nothing is downloaded. The version is then like any
other: canary it with 'parley ctl canary V --weight 5'.

The check reads config.json (architectures LlamaForCausalLM or Qwen2ForCausalLM; an
unsupported field is named), loads the tokenizer and matches every tensor's name, dtype and
shape against the config without converting the weights.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			cfg, files, err := inference.CheckHFCheckpoint(dir)
			if err != nil {
				return err
			}
			reg, err := registry.NewLocal(registryDir)
			if err != nil {
				return err
			}
			if version == "" {
				if version, err = registry.NextVersion(cmd.Context(), reg, name); err != nil {
					return err
				}
			}
			src, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			man, err := reg.Import(cmd.Context(), name, version, dir, files, schema.Manifest{
				Algorithm: "import",
				Hyperparameters: map[string]any{
					"source": src, "params": cfg.Params(), "layers": cfg.Layers, "hidden_size": cfg.Dim,
					"heads": cfg.Heads, "kv_heads": cfg.KVHeadCount(), "vocab_size": cfg.VocabSize,
				},
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "published %s/%s: %d files, %.1fM parameters, %s\n",
				man.Model, man.Version, len(man.Files), float64(cfg.Params())/1e6, reg.Dir(man.Model, man.Version))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&registryDir, "registry", "var/registry", "registry root")
	f.StringVar(&name, "name", "", "registry model to publish to, e.g. npc (required)")
	f.StringVar(&version, "version", "", "version to publish (default: the next v<N>)")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}
