//go:build faults

package faulttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/learner"
	"github.com/parleyhq/parley/simulator"
)

// learnerSpec is what a learner child needs: it runs one user-agent
// refresh and writes its result to Result.
type learnerSpec struct {
	DataDir         string `json:"data_dir"`
	Registry        string `json:"registry"`
	Steps           int    `json:"steps"`
	CheckpointEvery int    `json:"checkpoint_every"`
	Result          string `json:"result"`
}

// learnerResult is what the child reports of its refresh.
type learnerResult struct {
	Published   bool   `json:"published"`
	Version     string `json:"version"`
	ResumedFrom int    `json:"resumed_from"`
	Steps       int    `json:"steps"`
	Gate        string `json:"gate"`
}

// learnerConfig is a tiny user-agent refresh on spec's directories.
func learnerConfig(spec learnerSpec) learner.Config {
	sft := learner.DefaultSFTConfig(learner.RoleUser)
	sft.Arch.Dim, sft.Arch.Layers, sft.Arch.Heads, sft.Arch.FFNDim, sft.Arch.MaxSeq = 32, 2, 2, 64, 384
	sft.VocabSize = 400
	sft.Steps, sft.BatchSize, sft.CheckpointEvery = spec.Steps, 4, spec.CheckpointEvery
	sft.Train.LearningRate = 3e-3
	sft.HeldOutShare, sft.MaxTurns = 0.25, 4
	// An evaluation long enough (about a second) that kill 3, polling every
	// 100 ms for the last checkpoint, lands before the publish.
	sft.Eval = learner.EvalConfig{MaxDialogues: 16, MaxReplies: 16, ReplyTokens: 24, MaxTurns: 4, ScoreBatch: 4, Seed: 1}
	cfg := learner.DefaultConfig()
	cfg.DataDir, cfg.Registry = spec.DataDir, spec.Registry
	// RefreshNow does not consume: the broker address is never dialled.
	cfg.Consumer.Brokers, cfg.Consumer.Topic = []string{"127.0.0.1:9"}, "unused"
	cfg.Refresh.SFT = sft
	cfg.Refresh.EverySessions, cfg.Refresh.RhoTolerance = 1, 2
	return cfg
}

func runLearnerChild(ctx context.Context, raw string) error {
	var spec learnerSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return fmt.Errorf("learner spec: %w", err)
	}
	l, err := learner.New(learnerConfig(spec), learner.Deps{})
	if err != nil {
		return err
	}
	defer l.Store().Close()
	res, err := l.RefreshNow(ctx)
	if err != nil {
		return err
	}
	if res == nil {
		return fmt.Errorf("refresh postponed: too few players")
	}
	out, err := json.Marshal(learnerResult{Published: res.Published, Version: res.Version,
		ResumedFrom: res.ResumedFrom, Steps: len(res.Losses), Gate: res.GateReason})
	if err != nil {
		return err
	}
	return os.WriteFile(spec.Result, out, 0o644)
}

// checkpointSteps lists the steps of the checkpoints in runDir.
func checkpointSteps(runDir string) []int {
	ents, _ := os.ReadDir(runDir)
	var steps []int
	for _, e := range ents {
		var n int
		if _, err := fmt.Sscanf(e.Name(), "ckpt-%08d.gob", &n); err == nil && strings.HasSuffix(e.Name(), ".gob") {
			steps = append(steps, n)
		}
	}
	slices.Sort(steps)
	return steps
}

// registryEntries lists every entry under root/model, hidden ones included.
func registryEntries(root, model string) []string {
	ents, _ := os.ReadDir(filepath.Join(root, model))
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestLearnerKilledMidRefresh SIGKILLs a learner process twice while it
// fine-tunes the user agent, each time after a new checkpoint, and starts it
// again: the refresh resumes from its latest checkpoint, and at every point
// the registry holds only complete, verified versions — nothing
// half-published, and the served NPC version untouched.
func TestLearnerKilledMidRefresh(t *testing.T) {
	began := time.Now()
	root := t.TempDir()
	spec := learnerSpec{DataDir: filepath.Join(root, "learner"), Registry: filepath.Join(root, "registry"),
		Steps: 60, CheckpointEvery: 4, Result: filepath.Join(root, "result.json")}
	served := testenv.PublishTinyModel(t, spec.Registry, "npc", "v1")

	// The sessions the refresh trains on, already in the learner's store.
	cc := simulator.DefaultCorpusConfig()
	cc.Players, cc.DialoguesPerPlayer, cc.MaxTurns, cc.Seed, cc.IncludeHeldOut = 16, 4, 4, 3, true
	var buf bytes.Buffer
	if _, err := simulator.GenerateCorpus(context.Background(), cc, &buf); err != nil {
		t.Fatal(err)
	}
	ds, err := simulator.ReadCorpus(&buf)
	if err != nil {
		t.Fatal(err)
	}
	store, err := learner.OpenStore(filepath.Join(spec.DataDir, "sessions"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ds); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	reg, err := registry.NewLocal(spec.Registry)
	if err != nil {
		t.Fatal(err)
	}
	model := learner.DefaultSFTConfig(learner.RoleUser).Model
	checkRegistry := func(when string) []string {
		t.Helper()
		ctx := context.Background()
		mans, err := reg.List(ctx, model)
		if err != nil {
			t.Fatalf("%s: registry List: %v", when, err)
		}
		var versions []string
		for _, m := range mans {
			if _, err := reg.Verify(ctx, model, m.Version); err != nil {
				t.Errorf("%s: listed version %s does not verify: %v", when, m.Version, err)
			}
			versions = append(versions, m.Version)
		}
		for _, name := range registryEntries(spec.Registry, model) {
			if strings.HasPrefix(name, ".") {
				t.Logf("%s: registry holds the hidden temp dir %q of an interrupted publish (List ignores it)", when, name)
				continue
			}
			if !slices.Contains(versions, name) {
				t.Errorf("%s: registry holds %q under %s besides the versions %v (a half-published version)", when, name, model, versions)
			}
		}
		if _, err := reg.Verify(ctx, "npc", served.Version); err != nil {
			t.Errorf("%s: the served npc/%s no longer verifies: %v", when, served.Version, err)
		}
		return versions
	}

	runDir := filepath.Join(spec.DataDir, "runs", "refresh-"+model+"-000001")
	// Kill 1 and 2 land mid-training, after a new checkpoint; kill 3 right
	// after the last step's checkpoint, while the run evaluates and
	// publishes.
	killedAt := 0
	for kill := 1; kill <= 3; kill++ {
		target := killedAt + 1
		if kill == 3 {
			target = spec.Steps
		}
		c := startChild(t, childLearner, fmt.Sprintf("learner-%d", kill), spec)
		waitFor(t, 3*time.Minute, fmt.Sprintf("a checkpoint of step %d or later", target), func() bool {
			if c.exited() {
				t.Fatalf("learner %d exited before it could be killed (%v): the run is too short to test\n%s", kill, c.err, c.tail(2048))
			}
			s := checkpointSteps(runDir)
			return len(s) > 0 && s[len(s)-1] >= target
		})
		c.kill()
		s := checkpointSteps(runDir)
		killedAt = s[len(s)-1]
		versions := checkRegistry(fmt.Sprintf("after kill %d", kill))
		t.Logf("kill %d: SIGKILL after checkpoint of step %d (checkpoints %v); registry %s versions %v, entries %v",
			kill, killedAt, s, model, versions, registryEntries(spec.Registry, model))
		if len(versions) != 0 {
			t.Errorf("after kill %d: registry holds %v; want no version of an unfinished refresh", kill, versions)
		}
	}

	c := startChild(t, childLearner, "learner-final", spec)
	select {
	case <-c.done:
	case <-time.After(5 * time.Minute):
		t.Fatal("the resumed refresh did not finish within 5 minutes")
	}
	if c.err != nil {
		t.Fatalf("resumed refresh: %v\n%s", c.err, c.tail(4096))
	}
	raw, err := os.ReadFile(spec.Result)
	if err != nil {
		t.Fatal(err)
	}
	var res learnerResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	versions := checkRegistry("after the resumed refresh")
	t.Logf("resumed refresh: resumed from step %d, %d steps of losses, published %v as %q (%s); registry %s versions %v",
		res.ResumedFrom, res.Steps, res.Published, res.Version, res.Gate, model, versions)
	if res.ResumedFrom != killedAt {
		t.Errorf("resumed from step %d; want %d, the last checkpoint before the kill", res.ResumedFrom, killedAt)
	}
	if res.Steps != spec.Steps {
		t.Errorf("losses of %d steps; want %d (those before the kills included)", res.Steps, spec.Steps)
	}
	want := []string(nil)
	if res.Published {
		want = []string{res.Version}
	}
	if !slices.Equal(versions, want) {
		t.Errorf("registry %s versions %v; want %v", model, versions, want)
	}
	t.Logf("runtime %.1fs", time.Since(began).Seconds())
}
