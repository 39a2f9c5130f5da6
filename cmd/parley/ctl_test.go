package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/gateway/admin"
	"github.com/parleyhq/parley/gateway/admin/admintest"
	"github.com/parleyhq/parley/schema"
)

// runCtl runs `parley ctl args...` in-process under a root that, like
// parley's, fills flags from PARLEY_* variables; it returns stdout.
func runCtl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var g globalFlags
	root := &cobra.Command{
		Use: "parley", SilenceUsage: true, SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return flagsFromEnv(cmd.Flags()) },
	}
	root.AddCommand(newCtlCmd(&g))
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"ctl"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestCtlReadCommands(t *testing.T) {
	env := admintest.Start(t)
	api := []string{"--gateway", env.URL, "--api-key", admintest.Key}
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"status", []string{"status"}, []string{"state       canary", "v2 at 20%", env.ExperimentID, "gw-1", "gw-2", "ops-alice", "generation  2"}},
		{"models", []string{"models"}, []string{"VERSION", "AVG_L", "v1       stable", "v2       canary", "v3       -", "6.8"}},
		{"diff", []string{"models", "diff", "v1", "v2"}, []string{"METRIC", "avg_l", "+0.9", "+15.3%"}},
		{"show", []string{"models", "show", "v3"}, []string{`"parent": "v2"`, `"algorithm": "at-grpo"`}},
		{"report", []string{"report"}, []string{"experiment " + env.ExperimentID, "stable", "canary", "Avg.L", "decision: hold"}},
		{"report by id", []string{"report", "--experiment", env.ExperimentID}, []string{"mSPRT p"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := runCtl(t, append(api, c.args...)...)
			if err != nil {
				t.Fatalf("parley ctl %v: %v", c.args, err)
			}
			t.Logf("parley ctl %s:\n%s", strings.Join(c.args, " "), out)
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("parley ctl %v lacks %q:\n%s", c.args, w, out)
				}
			}
		})
	}
}

func TestCtlJSON(t *testing.T) {
	env := admintest.Start(t)
	t.Setenv("PARLEY_API_KEY", admintest.Key) // the key from the environment
	out, err := runCtl(t, "--gateway", env.URL, "--json", "status")
	if err != nil {
		t.Fatal(err)
	}
	var st admin.RolloutStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.State.Canary != admintest.Canary || len(st.Fleet) != 2 {
		t.Errorf("ctl --json status = %+v, %v; want the canary %s and 2 instances", st.State, err, admintest.Canary)
	}
	out, err = runCtl(t, "--gateway", env.URL, "--json", "report")
	if err != nil {
		t.Fatal(err)
	}
	var rep admin.ExperimentReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Report.Canary.AvgL.N != 40 {
		t.Errorf("ctl --json report = %+v, %v; want 40 canary sessions", rep.Report.Canary.AvgL, err)
	}
}

// TestCtlChanges drives a rollout through the CLI, with --generation as the
// compare-and-set token.
func TestCtlChanges(t *testing.T) {
	env := admintest.Start(t)
	api := []string{"--gateway", env.URL, "--api-key", admintest.Key}
	steps := []struct {
		args    []string
		wantErr string
		want    string
	}{
		{[]string{"canary", "v2"}, "one of --weight, --steps or --advance is required", ""},
		{[]string{"canary", "v2", "--weight", "5", "--steps", "5,20"}, "none of the others can be", ""},
		{[]string{"canary", "--advance"}, "409 conflict", ""},
		{[]string{"pause", "--generation", "1"}, "409 conflict", ""},
		{[]string{"resume"}, "409 conflict", ""},
		{[]string{"canary", "v2", "--weight", "50", "--generation", "2"}, "", "canary npc: canary → canary (generation 2 → 3) by ops-alice"},
		{[]string{"pause", "--generation", "3", "--reason", "weekend"}, "", "pause npc: canary → paused (generation 3 → 4)"},
		{[]string{"resume"}, "", "resume npc: paused → canary (generation 4 → 5)"},
		{[]string{"promote", "--reason", "Avg.L up"}, "", "stable v2"},
		{[]string{"canary", "v3", "--steps", "5,20,50", "--min-step-players", "100"}, "", "canary v3 at 5% (step 1 of 5→20→50%)"},
		{[]string{"canary", "--advance", "--reason", "looks fine"}, "", "canary v3 at 20% (step 2 of 5→20→50%)"},
		{[]string{"rollback"}, "", "canary → rolling_back"},
		{[]string{"promote"}, "409 conflict", ""},
	}
	for _, s := range steps {
		out, err := runCtl(t, append(api, s.args...)...)
		switch {
		case s.wantErr != "" && (err == nil || !strings.Contains(err.Error(), s.wantErr)):
			t.Errorf("parley ctl %v = %v; want an error with %q", s.args, err, s.wantErr)
		case s.wantErr == "" && err != nil:
			t.Errorf("parley ctl %v: %v", s.args, err)
		case !strings.Contains(out, s.want):
			t.Errorf("parley ctl %v printed %q; want %q", s.args, out, s.want)
		}
	}
	st, err := env.Rollout.Get(context.Background(), admintest.Deployment)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != schema.PhaseRollingBack || st.Stable != admintest.Canary || st.Generation != 9 {
		t.Errorf("rollout after the CLI = %s stable %s generation %d; want rolling_back stable v2 generation 9", st.State, st.Stable, st.Generation)
	}
}

func TestCtlNeedsKeyAndURL(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"status"}, "PARLEY_API_KEY"},
		{[]string{"status", "--api-key", "k", "--gateway", "localhost:8080"}, "http://"},
	}
	for _, c := range cases {
		if _, err := runCtl(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parley ctl %v = %v; want an error naming %q", c.args, err, c.want)
		}
	}
}

func TestCtlKeys(t *testing.T) {
	env := admintest.Start(t)
	redisArgs := []string{"keys", "--redis-addr", env.Redis.Addr, "--prefix", env.Redis.Prefix}
	keys := func(args ...string) (string, error) { return runCtl(t, append(redisArgs, args...)...) }

	key, err := keys("create", "--client", "ops-bob", "--role", "live-ops")
	if err != nil {
		t.Fatal(err)
	}
	key = strings.TrimSpace(key)
	if !strings.HasPrefix(key, "pk_") {
		t.Fatalf("keys create printed %q; want a pk_ key", key)
	}
	if _, err := keys("create", "--client", "x", "--role", "root"); err == nil || !strings.Contains(err.Error(), "root") {
		t.Errorf("keys create --role root = %v; want an error naming the role", err)
	}
	list, err := gateway.ListKeys(context.Background(), env.Redis.Client, env.Redis.Prefix)
	if err != nil || len(list) != 1 || list[0].ClientID != "ops-bob" || list[0].Role != gateway.RoleLiveOps {
		t.Fatalf("stored keys = %+v, %v; want one live-ops key of ops-bob", list, err)
	}
	out, err := keys("list")
	if err != nil || !strings.Contains(out, list[0].ID) || !strings.Contains(out, "ops-bob") || strings.Contains(out, key) {
		t.Errorf("keys list = %q, %v; want the id and client, never the key", out, err)
	}
	out, err = runCtl(t, append(redisArgs, "list", "--json")...)
	var got []gateway.KeyInfo
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || len(got) != 1 {
		t.Errorf("keys list --json = %q, %v; want one key", out, err)
	}
	if _, err := keys("revoke", list[0].ID); err != nil {
		t.Fatalf("keys revoke by id: %v", err)
	}
	if _, err := keys("revoke", key); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("revoking a revoked key = %v; want not found", err)
	}
	if out, _ := keys("list"); strings.Contains(out, "ops-bob") {
		t.Errorf("keys list after revoke still shows ops-bob:\n%s", out)
	}
}
