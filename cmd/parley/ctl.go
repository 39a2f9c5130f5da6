package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/gateway/admin"
	"github.com/parleyhq/parley/internal/redisconn"
	"github.com/parleyhq/parley/rollout/abtest"
	"github.com/parleyhq/parley/schema"
)

// ctlFlags are the flags of every `parley ctl` command that calls the admin API.
type ctlFlags struct {
	gateway, apiKey, deployment, model string
	json                               bool
	timeout                            time.Duration
}

func (f *ctlFlags) client() (*admin.Client, error) {
	if f.apiKey == "" {
		return nil, errors.New("an API key is required: --api-key or PARLEY_API_KEY (a live-ops or admin key; see parley ctl keys create)")
	}
	if !strings.HasPrefix(f.gateway, "http://") && !strings.HasPrefix(f.gateway, "https://") {
		return nil, fmt.Errorf("--gateway %q must be an http:// or https:// URL", f.gateway)
	}
	return &admin.Client{
		BaseURL: strings.TrimRight(f.gateway, "/") + admin.DefaultAPIPath, APIKey: f.apiKey,
		Deployment: f.deployment, Model: f.model,
	}, nil
}

// ctlRun calls fn with an admin client and a context bounded by --timeout, then
// prints its result as JSON (--json) or with human.
func ctlRun[T any](f *ctlFlags, fn func(context.Context, *admin.Client) (T, error), human func(io.Writer, T) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		cl, err := f.client()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
		defer cancel()
		v, err := fn(ctx, cl)
		if err != nil {
			return err
		}
		if f.json {
			return printJSON(cmd.OutOrStdout(), v)
		}
		return human(cmd.OutOrStdout(), v)
	}
}

func newCtlCmd(g *globalFlags) *cobra.Command {
	f := &ctlFlags{}
	cmd := &cobra.Command{
		Use:   "ctl",
		Short: "Live-ops control: API keys, rollout status, canary, promote, rollback, reports",
		Long: `Live-ops control of a deployment through the gateway's admin API (a live-ops or admin
API key), and management of API keys directly in Redis.

Every rollout change is a compare-and-set on the rollout's generation: pass --generation
with the generation you looked at (parley ctl status shows it) and the change fails with
a conflict if someone else changed the rollout meanwhile.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.gateway, "gateway", "http://127.0.0.1:8080", "gateway URL")
	pf.StringVar(&f.apiKey, "api-key", "", "live-ops or admin API key (PARLEY_API_KEY)")
	pf.StringVar(&f.deployment, "deployment", "", "deployment (empty: the gateway's)")
	pf.StringVar(&f.model, "model", "", "registry model (empty: the gateway's)")
	pf.BoolVar(&f.json, "json", false, "print JSON instead of tables")
	pf.DurationVar(&f.timeout, "timeout", 30*time.Second, "timeout of each call")

	cmd.AddCommand(
		newCtlStatusCmd(f),
		newCtlModelsCmd(f),
		newCtlCanaryCmd(f),
		newCtlChangeCmd(f, "promote", "Make the canary the stable version", (*admin.Client).Promote),
		newCtlChangeCmd(f, "rollback", "Send new sessions back to stable; sessions on the canary finish on it", (*admin.Client).Rollback),
		newCtlChangeCmd(f, "pause", "Stop new sessions from joining the canary, keeping its weight", (*admin.Client).Pause),
		newCtlChangeCmd(f, "resume", "Let new sessions join the paused canary again", (*admin.Client).Resume),
		newCtlReportCmd(f),
		newCtlKeysCmd(f),
	)
	return cmd
}

func newCtlStatusCmd(f *ctlFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the rollout state, the fleet and the recent changes",
		Args:  cobra.NoArgs,
		RunE: ctlRun(f, func(ctx context.Context, c *admin.Client) (admin.RolloutStatus, error) { return c.Rollout(ctx) },
			writeStatus),
	}
}

func writeStatus(w io.Writer, st admin.RolloutStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	s := st.State
	fmt.Fprintf(tw, "deployment\t%s\n", s.Deployment)
	fmt.Fprintf(tw, "state\t%s\n", s.State)
	fmt.Fprintf(tw, "stable\t%s\n", s.Stable)
	if s.Canary != "" {
		fmt.Fprintf(tw, "canary\t%s at %d%%\n", s.Canary, s.CanaryWeight)
	}
	if len(s.Steps) > 0 {
		fmt.Fprintf(tw, "steps\t%s, at step %d (%d players per arm to advance)\n", joinSteps(s.Steps), s.Step+1, s.MinStepPlayers)
	}
	if s.ExperimentID != "" {
		fmt.Fprintf(tw, "experiment\t%s (salt %s, canary share %d%%)\n", s.ExperimentID, s.Salt, s.Split)
	}
	if s.PauseReason != "" {
		fmt.Fprintf(tw, "paused because\t%s\n", s.PauseReason)
	}
	fmt.Fprintf(tw, "generation\t%d\n", s.Generation)
	fmt.Fprintf(tw, "updated\t%s by %s\n", s.UpdatedAt.UTC().Format(time.RFC3339), s.UpdatedBy)
	fmt.Fprintf(tw, "\nINSTANCE\tGEN\tSTABLE\tCANARY\tLOADED\tSESSIONS\tHEARTBEAT\tLAST ERROR\n")
	if len(st.Fleet) == 0 {
		fmt.Fprintf(tw, "(no instance has reported)\n")
	}
	for _, in := range st.Fleet {
		loaded := strings.Join(in.Loaded, ",")
		if in.Loading != "" {
			loaded += " (loading " + in.Loading + ")"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", in.Instance, in.Generation, in.Stable, dash(in.Canary),
			loaded, in.Sessions, in.UpdatedAt.UTC().Format(time.TimeOnly), dash(in.LastError))
	}
	fmt.Fprintf(tw, "\nAT\tACTION\tBY\tGEN\tSTABLE\tCANARY\tREASON\n")
	hist := st.History
	if len(hist) > 10 {
		hist = hist[len(hist)-10:]
	}
	for _, h := range hist {
		canary := "-"
		if h.To.Canary != "" {
			canary = fmt.Sprintf("%s @ %d%%", h.To.Canary, h.To.CanaryWeight)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", h.At.UTC().Format(time.RFC3339), h.Action, h.By,
			h.To.Generation, h.To.Stable, canary, dash(h.Reason))
	}
	return tw.Flush()
}

func newCtlModelsCmd(f *ctlFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "models",
		Short: "List the registry's versions with their metrics and what each serves as",
		Args:  cobra.NoArgs,
		RunE: ctlRun(f, func(ctx context.Context, c *admin.Client) (admin.ModelList, error) { return c.Models(ctx) },
			writeModels),
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "diff A B",
		Short: "Compare the metrics of versions A and B (B − A)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return ctlRun(f, func(ctx context.Context, c *admin.Client) (admin.ModelDiff, error) {
				return c.Diff(ctx, args[0], args[1])
			}, writeDiff)(cmd, args)
		},
	}, &cobra.Command{
		Use:   "show VERSION",
		Short: "Print the manifest of one version",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return ctlRun(f, func(ctx context.Context, c *admin.Client) (schema.Manifest, error) {
				return c.Manifest(ctx, args[0])
			}, func(w io.Writer, m schema.Manifest) error { return printJSON(w, m) })(cmd, args)
		},
	})
	return cmd
}

func writeModels(w io.Writer, l admin.ModelList) error {
	names := map[string]bool{}
	for _, v := range l.Versions {
		for n := range v.Metrics {
			names[n] = true
		}
	}
	metrics := make([]string, 0, len(names))
	for n := range names {
		metrics = append(metrics, n)
	}
	sort.Strings(metrics)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "VERSION\tSERVING\tALGORITHM\tPARENT\tCREATED")
	for _, n := range metrics {
		fmt.Fprintf(tw, "\t%s", strings.ToUpper(n))
	}
	fmt.Fprintln(tw)
	for _, v := range l.Versions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s", v.Version, dash(v.Serving), v.Algorithm, dash(v.Parent), v.CreatedAt.UTC().Format(time.RFC3339))
		for _, n := range metrics {
			if x, ok := v.Metrics[n]; ok {
				fmt.Fprintf(tw, "\t%.4g", x)
			} else {
				fmt.Fprintf(tw, "\t-")
			}
		}
		fmt.Fprintln(tw)
	}
	if len(l.Versions) == 0 {
		fmt.Fprintf(tw, "(model %s has no versions)\n", l.Model)
	}
	return tw.Flush()
}

func writeDiff(w io.Writer, d admin.ModelDiff) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "METRIC\t%s\t%s\tDELTA\tREL\n", d.A, d.B)
	num := func(p *float64, format string) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprintf(format, *p)
	}
	for _, m := range d.Metrics {
		rel := "-"
		if m.Rel != nil {
			rel = fmt.Sprintf("%+.1f%%", 100**m.Rel)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Name, num(m.A, "%.4g"), num(m.B, "%.4g"), num(m.Delta, "%+.4g"), rel)
	}
	return tw.Flush()
}

func newCtlCanaryCmd(f *ctlFlags) *cobra.Command {
	var weight, minStepPlayers int
	var steps []int
	var generation int64
	var advance bool
	var reason string
	cmd := &cobra.Command{
		Use:   "canary VERSION (--weight N | --steps 5,20,50) | canary --advance",
		Short: "Start a canary of VERSION on N % of new players or through steps, ramp the running one, or advance it to its next step",
		Long: `Start a canary of VERSION on N % of new players (--weight), or one that moves through
rising weights (--steps 5,20,50): it starts at the first, and the learner's analysis advances
it to the next once each arm has --min-step-players players in the step and the analysis holds
(guardrails judged and not breached, sample ratio and assignment audit passing), when
automatic promotion is on. --advance moves it to the next step by hand.

Raising the weight of the running canary widens the experiment and moves nobody between
arms; lowering it, or a new version, starts a new experiment with a new salt.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if advance {
				return cobra.NoArgs(cmd, args)
			}
			if err := cobra.ExactArgs(1)(cmd, args); err != nil {
				return err
			}
			if !cmd.Flags().Changed("weight") && !cmd.Flags().Changed("steps") {
				return errors.New("one of --weight, --steps or --advance is required")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			gen := optionalGeneration(cmd, generation)
			if advance {
				return ctlRun(f, func(ctx context.Context, c *admin.Client) (schema.RolloutChange, error) {
					return c.Advance(ctx, admin.ChangeRequest{Generation: gen, Reason: reason})
				}, writeChange)(cmd, args)
			}
			req := schema.CanaryRequest{Version: args[0], Weight: weight, Steps: steps, MinStepPlayers: minStepPlayers, Generation: gen}
			return ctlRun(f, func(ctx context.Context, c *admin.Client) (schema.RolloutChange, error) {
				return c.Canary(ctx, req)
			}, writeChange)(cmd, args)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&weight, "weight", 0, "percent of new players on the canary, 1-100")
	fl.IntSliceVar(&steps, "steps", nil, "rising weights the canary advances through, such as 5,20,50")
	fl.IntVar(&minStepPlayers, "min-step-players", 0, "players each arm needs in a step before it advances automatically")
	fl.BoolVar(&advance, "advance", false, "move the running canary to its next step")
	fl.StringVar(&reason, "reason", "", "why, for the rollout history (--advance)")
	fl.Int64Var(&generation, "generation", 0, "only if the rollout is still at this generation")
	cmd.MarkFlagsMutuallyExclusive("weight", "steps", "advance")
	return cmd
}

func newCtlChangeCmd(f *ctlFlags, name, short string, do func(*admin.Client, context.Context, admin.ChangeRequest) (schema.RolloutChange, error)) *cobra.Command {
	var generation int64
	var reason string
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := admin.ChangeRequest{Generation: optionalGeneration(cmd, generation), Reason: reason}
			return ctlRun(f, func(ctx context.Context, c *admin.Client) (schema.RolloutChange, error) {
				return do(c, ctx, req)
			}, writeChange)(cmd, args)
		},
	}
	cmd.Flags().Int64Var(&generation, "generation", 0, "only if the rollout is still at this generation")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the rollout history")
	return cmd
}

// optionalGeneration is --generation when it was given.
func optionalGeneration(cmd *cobra.Command, g int64) *int64 {
	if !cmd.Flags().Changed("generation") {
		return nil
	}
	return &g
}

func writeChange(w io.Writer, ch schema.RolloutChange) error {
	t := ch.To
	fmt.Fprintf(w, "%s %s: %s → %s (generation %d → %d) by %s\n", ch.Action, t.Deployment, ch.From.State, t.State,
		ch.From.Generation, t.Generation, ch.By)
	fmt.Fprintf(w, "stable %s", t.Stable)
	if t.Canary != "" {
		fmt.Fprintf(w, ", canary %s at %d%%", t.Canary, t.CanaryWeight)
	}
	if len(t.Steps) > 0 {
		fmt.Fprintf(w, " (step %d of %s)", t.Step+1, joinSteps(t.Steps))
	}
	if t.ExperimentID != "" {
		fmt.Fprintf(w, ", experiment %s", t.ExperimentID)
	}
	_, err := fmt.Fprintln(w)
	return err
}

// joinSteps writes canary steps as "5→20→50%".
func joinSteps(steps []int) string {
	parts := make([]string, len(steps))
	for i, w := range steps {
		parts[i] = strconv.Itoa(w)
	}
	return strings.Join(parts, "→") + "%"
}

func newCtlReportCmd(f *ctlFlags) *cobra.Command {
	var experiment string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Show the A/B report of the running (or a named) experiment and what it recommends",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return ctlRun(f, func(ctx context.Context, c *admin.Client) (admin.ExperimentReport, error) {
				return c.Report(ctx, experiment)
			}, func(w io.Writer, r admin.ExperimentReport) error {
				auto := "off"
				if r.Guardrails.AutoPromote {
					auto = "on"
				}
				fmt.Fprintf(w, "published by %s at %s (generation %d), automatic promotion %s\n",
					r.By, r.At.UTC().Format(time.RFC3339), r.Generation, auto)
				if r.Audit.Failed() {
					fmt.Fprintf(w, "ASSIGNMENT AUDIT FAILED: %d of %d sessions on the wrong arm (%s)\n", r.Audit.Wrong, r.Audit.Checked, r.Audit.Example)
				}
				return abtest.WriteText(w, r.Report, &r.Decision)
			})(cmd, args)
		},
	}
	cmd.Flags().StringVar(&experiment, "experiment", "", "experiment id (empty: the deployment's current one)")
	return cmd
}

func newCtlKeysCmd(f *ctlFlags) *cobra.Command {
	rc := redisconn.Config{Addr: "127.0.0.1:6379"}
	var prefix string
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Create, revoke and list API keys (in Redis directly)",
		Long: `Create, revoke and list the gateway's API keys. These commands talk to Redis directly
(--redis-addr), since no key exists yet when the first one is made. Only the sha256 of a
key is stored: a new key is shown once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	pf := cmd.PersistentFlags()
	redisFlags(pf, &rc.Addr, &rc.MasterName, &rc.Cluster, "Redis of the keys")
	pf.StringVar(&prefix, "prefix", "parley:", "Redis key prefix")
	withRedis := func(cmd *cobra.Command, fn func(context.Context, redis.UniversalClient) error) error {
		if err := rc.Validate(); err != nil {
			return err
		}
		rdb := rc.Open()
		defer rdb.Close()
		ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
		defer cancel()
		return fn(ctx, rdb)
	}

	var client, role string
	create := &cobra.Command{
		Use:   "create --client ID --role ROLE",
		Short: "Make a new API key for a client with a role: player-client, live-ops or admin",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withRedis(cmd, func(ctx context.Context, rdb redis.UniversalClient) error {
				key, err := gateway.CreateKey(ctx, rdb, prefix, client, gateway.Role(role))
				if err != nil {
					return err
				}
				if f.json {
					return printJSON(cmd.OutOrStdout(), map[string]string{"key": key, "client_id": client, "role": role})
				}
				fmt.Fprintln(cmd.OutOrStdout(), key)
				fmt.Fprintf(cmd.ErrOrStderr(), "created a %s key for %s; it is shown only this once\n", role, client)
				return nil
			})
		},
	}
	create.Flags().StringVar(&client, "client", "", "client id the key authenticates as")
	create.Flags().StringVar(&role, "role", string(gateway.RolePlayerClient), "player-client, live-ops or admin")
	_ = create.MarkFlagRequired("client")

	revoke := &cobra.Command{
		Use:   "revoke KEY_OR_ID",
		Short: "Revoke a key, given the key itself or its id from keys list",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withRedis(cmd, func(ctx context.Context, rdb redis.UniversalClient) error {
				if err := gateway.RevokeKey(ctx, rdb, prefix, args[0]); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), "revoked")
				return nil
			})
		},
	}

	list := &cobra.Command{
		Use:   "list",
		Short: "List the stored keys: id (the key's sha256), client, role, created",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withRedis(cmd, func(ctx context.Context, rdb redis.UniversalClient) error {
				keys, err := gateway.ListKeys(ctx, rdb, prefix)
				if err != nil {
					return err
				}
				if f.json {
					return printJSON(cmd.OutOrStdout(), keys)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintf(tw, "ID\tCLIENT\tROLE\tCREATED\n")
				for _, k := range keys {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.ID, k.ClientID, k.Role, k.CreatedAt.UTC().Format(time.RFC3339))
				}
				return tw.Flush()
			})
		},
	}
	cmd.AddCommand(create, revoke, list)
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
