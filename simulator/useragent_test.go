package simulator

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
)

func TestUserAgentFormulas(t *testing.T) {
	t.Run("P_T", func(t *testing.T) {
		tests := []struct{ pT, pC, want float64 }{{0.2, 0.6, 0.25}, {0.5, 0.5, 0.5}, {0.01, 0.99, 0.01}, {0.3, 0.1, 0.75}}
		for _, tt := range tests {
			if got := TerminationShare(math.Log(tt.pT), math.Log(tt.pC)); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("TerminationShare(log %g, log %g) = %g; want %g", tt.pT, tt.pC, got, tt.want)
			}
		}
	})
	t.Run("alpha", func(t *testing.T) {
		tests := []struct {
			step int
			want float64
		}{{0, 1}, {9, 1}, {10, 1.02}, {19, 1.02}, {25, 1.04}, {100, 1.2}}
		for _, tt := range tests {
			if got := DynamicAlpha(0.02, 10, tt.step); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("DynamicAlpha(0.02, 10, %d) = %g; want %g", tt.step, got, tt.want)
			}
		}
	})
	t.Run("p and r", func(t *testing.T) {
		tests := []struct {
			pT, alpha  float64
			terminated bool
			wantP      float64
			wantR      float64
		}{
			{0.25, 1, false, 0.5, 0.5},
			{0.25, 1.02, false, 0.51, 0.49},
			{0.25, 1.02, true, 0.51, 0},
			{0.6, 1, false, 1, 0}, // clipped at 1
			{0.45, 1.2, false, 1, 0},
			{0, 1.2, false, 0, 1},
		}
		for _, tt := range tests {
			p := EndProbability(tt.pT, tt.alpha)
			r := StepReward(p, tt.terminated)
			if math.Abs(p-tt.wantP) > 1e-12 || math.Abs(r-tt.wantR) > 1e-12 {
				t.Errorf("P_T %g, α %g, terminated %v: p = %g, r = %g; want %g, %g", tt.pT, tt.alpha, tt.terminated, p, r, tt.wantP, tt.wantR)
			}
		}
	})
}

func promptDialogues() []PromptDialogue {
	return []PromptDialogue{
		{Exchanges: []schema.Exchange{{Turn: 1, User: "hi", NPC: "Hello!"}, {Turn: 2, User: "fish?", NPC: "Trout."}}, Risks: []float64{0.1, 0.25}, Terminated: true},
		{Exchanges: []schema.Exchange{{Turn: 1, User: "yo", NPC: "Welcome."}}, Risks: []float64{0.3}, Terminated: false},
		{Exchanges: []schema.Exchange{{Turn: 1, User: "hey [Terminate]", NPC: "Hi."}, {Turn: 2, User: "sword", NPC: "Which sword?"}}, Risks: []float64{0.14}},
	}
}

func TestRenderUserAgentPrompt(t *testing.T) {
	ds := promptDialogues()
	got := DefaultUserAgentConfig().RenderUserAgentPrompt(ds[:2], ds[2])
	want := "<|sys|>Earlier dialogue of this player.<|end|>" +
		"<|user|>[Continue] hi<|end|><|npc|>Hello! [End Risk: 0.10]<|end|>" +
		"<|user|>[Continue] fish?<|end|><|npc|>Trout. [End Risk: 0.25]<|end|><|user|>[Terminate]<|end|>" +
		"<|sys|>Earlier dialogue of this player.<|end|>" +
		"<|user|>[Continue] yo<|end|><|npc|>Welcome. [End Risk: 0.30]<|end|>" +
		"<|sys|>Current dialogue.<|end|>" +
		"<|user|>[Continue] hey [Terminate]<|end|><|npc|>Hi. [End Risk: 0.14]<|end|>" +
		"<|user|>[Continue] sword<|end|><|npc|>Which sword?<|end|><|user|>"
	if got != want {
		t.Errorf("RenderUserAgentPrompt =\n%s\nwant\n%s", got, want)
	}
}

func TestEmpiricalRisks(t *testing.T) {
	x := func(n int) []schema.Exchange { return make([]schema.Exchange, n) }
	ds := []schema.Dialogue{
		{Exchanges: x(1), Reason: schema.EndPlayerEnded},
		{Exchanges: x(2), Reason: schema.EndIdleTimeout},
		{Exchanges: x(3), Reason: schema.EndMaxTurns},
		{Exchanges: x(2), Reason: schema.EndSafety},
	}
	got := EmpiricalRisks(ds, 3)
	want := []float64{1.0 / 4, 1.0 / 3, 0}
	for k := range want {
		if math.Abs(got[k]-want[k]) > 1e-12 {
			t.Errorf("EmpiricalRisks = %v; want %v", got, want)
			break
		}
	}
}

// tinyUserAgentEngine starts an engine on an untrained tiny model whose
// tokenizer is trained on a small generated corpus.
func tinyUserAgentEngine(t *testing.T) (*inference.Engine, []schema.Dialogue) {
	t.Helper()
	cfg := smallCorpusConfig()
	cfg.Players, cfg.DialoguesPerPlayer, cfg.MaxTurns, cfg.Population.HeldOutRate = 4, 3, 4, 0
	var buf bytes.Buffer
	if _, err := GenerateCorpus(t.Context(), cfg, &buf); err != nil {
		t.Fatal(err)
	}
	ds, err := ReadCorpus(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, d := range ds {
		for _, x := range d.Exchanges {
			texts = append(texts, x.User, x.NPC)
		}
	}
	tok, err := inference.TrainTokenizer(texts, 400)
	if err != nil {
		t.Fatal(err)
	}
	mc := inference.DefaultModelConfig()
	mc.VocabSize, mc.Dim, mc.Layers, mc.Heads, mc.FFNDim, mc.MaxSeq = tok.VocabSize(), 32, 1, 2, 64, 1024
	m, err := inference.NewModel(mc, inference.DefaultBackendConfig(), 5)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := inference.NewEngine(m, tok, inference.EngineConfig{MaxBatch: 4, QueueSize: 2, ScoreBatch: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine Run = %v", err)
		}
		_ = eng.Close()
	})
	return eng, ds
}

// shiftedEngine lowers the log-probability of [Terminate] by a constant, so
// an untrained model (P_T ≈ 0.5, p = 1) lets players go on and the reply
// path runs too.
type shiftedEngine struct {
	*inference.Engine
	term  int
	shift float32
}

func (e shiftedEngine) Score(ctx context.Context, prompt []int, conts [][]int) ([][]float32, error) {
	lps, err := e.Engine.Score(ctx, prompt, conts)
	for i, c := range conts {
		if err == nil && c[len(c)-1] == e.term {
			lps[i][len(lps[i])-1] -= e.shift
		}
	}
	return lps, err
}

func TestUserAgentStep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a tiny model on the CPU")
	}
	real, ds := tinyUserAgentEngine(t)
	term, _ := real.Tokenizer().TokenID(inference.TokTerminate)
	cont, _ := real.Tokenizer().TokenID(inference.TokContinue)
	eng := shiftedEngine{Engine: real, term: term, shift: 2.5}
	cfg := DefaultUserAgentConfig()
	cfg.Sampling.MaxTokens = 6
	ua, err := NewUserAgent(eng, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Four queries of one player: the same demos, different current dialogues.
	risks := EmpiricalRisks(ds, 4)
	demos := []PromptDialogue{PromptDialogueOf(ds[0], risks), PromptDialogueOf(ds[1], risks)}
	var qs []UserAgentQuery
	for _, d := range ds[2:6] {
		qs = append(qs, UserAgentQuery{Demos: demos, Current: PromptDialogue{Exchanges: d.Exchanges[:1]}})
	}
	const step = 25
	got, err := ua.Step(t.Context(), step, qs, 42)
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	if len(got) != len(qs) {
		t.Fatalf("Step returned %d answers for %d queries", len(got), len(qs))
	}
	alpha := DynamicAlpha(cfg.Lambda, cfg.StepInterval, step)
	tok := eng.Tokenizer()
	replies := 0
	for i, a := range got {
		// The batched score agrees with scoring the prompt alone.
		prompt, dropped, err := ua.fit(tok, qs[i], ua.budget())
		if err != nil {
			t.Fatal(err)
		}
		if dropped != a.Truncated {
			t.Errorf("query %d: Truncated = %d; fit dropped %d", i, a.Truncated, dropped)
		}
		lp, err := eng.Score(t.Context(), prompt, [][]int{{term}, {cont}})
		if err != nil {
			t.Fatal(err)
		}
		if want := TerminationShare(float64(lp[0][0]), float64(lp[1][0])); math.Abs(a.PT-want) > 1e-4 {
			t.Errorf("query %d: batched P_T %.6f; alone %.6f", i, a.PT, want)
		}
		if a.PT <= 0 || a.PT >= 1 {
			t.Errorf("query %d: P_T %g outside (0, 1)", i, a.PT)
		}
		if want := math.Min(alpha*2*a.PT, 1); a.P != want {
			t.Errorf("query %d: p = %g; want min(%g·2·%g, 1) = %g", i, a.P, alpha, a.PT, want)
		}
		wantR := 1 - a.P
		if a.Terminated {
			wantR = 0
			if a.Reply != "" {
				t.Errorf("query %d: terminated with a reply %q", i, a.Reply)
			}
		}
		if !a.Terminated {
			replies++
		}
		if a.Reward != wantR {
			t.Errorf("query %d: r = %g; want %g (terminated %v)", i, a.Reward, wantR, a.Terminated)
		}
	}
	if replies == 0 {
		t.Error("every player terminated; want the reply path exercised")
	}
	for i, a := range got[:3] {
		t.Logf("query %d: P_T %.4f p %.4f r %.4f terminated %v truncated %d reply %q", i, a.PT, a.P, a.Reward, a.Terminated, a.Truncated, a.Reply)
	}
	// The scoring-only path gives the p that Step acted on.
	scores, err := ua.Terminations(t.Context(), step, qs)
	if err != nil {
		t.Fatalf("Terminations: %v", err)
	}
	for i, sc := range scores {
		if sc.P != got[i].P || sc.PT != got[i].PT || sc.Truncated != got[i].Truncated {
			t.Errorf("query %d: Terminations %+v; Step answered P_T %g, p %g, truncated %d", i, sc, got[i].PT, got[i].P, got[i].Truncated)
		}
		if want := TerminationShare(sc.Logit, 0); math.Abs(sc.PT-want) > 1e-12 {
			t.Errorf("query %d: P_T %g; want σ(logit %g) = %g uncalibrated", i, sc.PT, sc.Logit, want)
		}
	}
	// A calibrated agent maps the same logits through its calibration.
	cal := Calibration{Scale: 0.5, Offset: -1}
	calibrated, err := ua.WithCalibration(cal)
	if err != nil {
		t.Fatal(err)
	}
	recal, err := calibrated.Terminations(t.Context(), step, qs)
	if err != nil {
		t.Fatal(err)
	}
	for i, sc := range recal {
		if want := cal.TerminationShare(scores[i].Logit, TurnFeatures{}); sc.Logit != scores[i].Logit || math.Abs(sc.PT-want) > 1e-12 {
			t.Errorf("query %d calibrated: logit %g, P_T %g; want logit %g, P_T %g", i, sc.Logit, sc.PT, scores[i].Logit, want)
		}
	}
	// Fitting on logged sessions asks about every observed decision.
	wantDecisions := 0
	for _, d := range ds[2:6] {
		qs, _ := DecisionQueries(d, demos, risks)
		wantDecisions += len(qs)
	}
	if _, n, err := ua.FitCalibrationOn(t.Context(), ds[2:6], func(schema.Dialogue) []PromptDialogue { return demos }, risks); n != wantDecisions {
		t.Errorf("FitCalibrationOn used %d decisions (err %v); want %d", n, err, wantDecisions)
	}
	again, err := ua.Step(t.Context(), step, qs, 42)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i].Terminated != again[i].Terminated || got[i].P != again[i].P {
			t.Errorf("query %d: the same seed gave %+v then %+v", i, got[i], again[i])
		}
	}
}

func TestEncodeUserAgentTraining(t *testing.T) {
	tok, err := inference.TrainTokenizer([]string{"hi hello fish trout yo welcome sword which"}, 300)
	if err != nil {
		t.Fatal(err)
	}
	ds := promptDialogues()
	cfg := DefaultUserAgentConfig()
	ids, w, err := cfg.EncodeUserAgentTraining(tok, ds[:2], ds[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(w) {
		t.Fatalf("%d ids, %d weights", len(ids), len(w))
	}
	// The weighted tokens decode to exactly the target's user turns.
	var target []int
	for i, id := range ids {
		if w[i] == 1 {
			target = append(target, id)
		}
	}
	want := "<|user|>[Continue] hi<|end|><|user|>[Continue] fish?<|end|><|user|>[Terminate]<|end|>"
	if got := tok.Decode(target); got != want {
		t.Errorf("weighted tokens decode to %q; want %q", got, want)
	}
	text := tok.Decode(ids)
	if want := render(cfg.layout(ds[:2], ds[0], false, false)); text != want {
		t.Errorf("training text = %q; want %q", text, want)
	}
	// A finished target keeps its last risk and ends with [Terminate].
	if !strings.HasSuffix(text, "<|sys|>Current dialogue.<|end|><|user|>[Continue] hi<|end|><|npc|>Hello! [End Risk: 0.10]<|end|>"+
		"<|user|>[Continue] fish?<|end|><|npc|>Trout. [End Risk: 0.25]<|end|><|user|>[Terminate]<|end|>") {
		t.Errorf("training text ends %q", text[max(0, len(text)-200):])
	}
}
