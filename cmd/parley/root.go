package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/parleyhq/parley/internal/telemetry"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// globalFlags are the flags every subcommand shares.
type globalFlags struct {
	logLevel, logFormat string
}

func newRootCmd() *cobra.Command {
	var g globalFlags
	root := &cobra.Command{
		Use:   "parley",
		Short: "Serve game NPC dialogue agents and keep improving them from live play",
		Long: `Parley serves NPC dialogue agents through a chat API, logs every session to Kafka,
learns a user agent from real play and improves the NPC policy with AT-GRPO against it,
and rolls new policies out through Redis-coordinated canaries and A/B tests.

Every flag can also be set with an environment variable: PARLEY_ and the flag name in
upper case with dashes as underscores (--data-dir → PARLEY_DATA_DIR). Flags win.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagsFromEnv(cmd.Flags())
		},
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	root.AddCommand(
		newDevCmd(&g),
		newGatewayCmd(&g),
		newLearnerCmd(&g),
		newCtlCmd(&g),
		newBotsCmd(&g),
		newTrainCmd(&g),
		newEvalCmd(),
		newExperimentCmd(&g),
		newBenchCmd(),
		newCorpusCmd(),
		newModelsCmd(),
		newVersionCmd(),
	)
	return root
}

// flagsFromEnv sets every flag the user did not pass from its PARLEY_*
// environment variable, if one is set.
func flagsFromEnv(fs *pflag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		name := "PARLEY_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// newTelemetry builds the process's telemetry from the global flags and the
// standard OpenTelemetry environment.
func newTelemetry(ctx context.Context, g *globalFlags, service string) (*telemetry.Telemetry, error) {
	cfg := telemetry.DefaultConfig()
	cfg.ServiceName = service
	cfg.LogLevel, cfg.LogFormat = g.logLevel, g.logFormat
	cfg.OTLPEndpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	return telemetry.New(ctx, cfg, os.Stderr)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			goVersion := "unknown"
			if info, ok := debug.ReadBuildInfo(); ok {
				goVersion = info.GoVersion
			}
			fmt.Fprintf(cmd.OutOrStdout(), "parley %s (%s)\n", version, goVersion)
		},
	}
}
