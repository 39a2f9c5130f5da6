package learner

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/parleyhq/parley/gateway/modelpool"
	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// shortCard is the NPC's card in these tests: a short system turn keeps
// the sequences, and the tests, short.
const shortCard = "You are Mira, a companion in a fantasy game."

// chatMLControls are the control tokens of the tiny Qwen checkpoint.
var chatMLControls = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

// importQwen writes a scaled-down random Qwen2 checkpoint in the Hugging
// Face layout (grouped-query attention, q/k/v biases, an untied lm_head; a
// byte-level tokenizer.json trained on the dialogues' text whose control
// tokens are ChatML's and none of Parley's; Qwen 2.5's tokenizer_config.json
// with its chat template; a generation_config.json) and imports it as
// model/v1 into a registry at root as `parley models import` does. It returns
// the checkpoint's directory.
func importQwen(t *testing.T, root, model string, ds []schema.Dialogue) string {
	t.Helper()
	texts := []string{shortCard}
	for _, d := range ds {
		for _, x := range d.Exchanges {
			texts = append(texts, x.User, x.NPC)
		}
	}
	parley, err := inference.TrainTokenizer(texts, 400)
	if err != nil {
		t.Fatal(err)
	}
	tokPath := filepath.Join(t.TempDir(), inference.TokenizerFile)
	if err := parley.Save(tokPath); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	chatML := strings.NewReplacer(`"<|pad|>"`, `"<|endoftext|>"`, `"<|sys|>"`, `"<|im_start|>"`, `"<|user|>"`, `"<|im_end|>"`,
		`"<|npc|>"`, `"<|fim_prefix|>"`, `"<|end|>"`, `"<|fim_middle|>"`, `"[Continue]"`, `"<|fim_suffix|>"`, `"[Terminate]"`, `"<|fim_pad|>"`)
	if err := os.WriteFile(tokPath, []byte(chatML.Replace(string(raw))), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := inference.LoadTokenizer(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := inference.ModelConfig{VocabSize: tok.VocabSize(), Dim: 32, Layers: 1, Heads: 4, KVHeads: 2, FFNDim: 64,
		MaxSeq: 256, RopeBase: 1e6, NormEps: 1e-6, QKVBias: true, UntiedHead: true}
	m, err := inference.NewModel(cfg, inference.DefaultBackendConfig(), 11)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "Qwen2.5-tiny-Instruct")
	if err := inference.SaveCheckpoint(src, m, tok, schema.Manifest{Model: "qwen-tiny", Version: "v0", Algorithm: "random-init"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(src, inference.ManifestFile)); err != nil { // a Hugging Face directory has none
		t.Fatal(err)
	}
	tc, err := os.ReadFile(filepath.Join("..", "inference", "testdata", "chat_templates", "qwen2.5", "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	imEnd, _ := tok.TokenID("<|im_end|>")
	eot, _ := tok.TokenID("<|endoftext|>")
	for name, body := range map[string]string{
		"tokenizer_config.json":  string(tc),
		"generation_config.json": fmt.Sprintf(`{"bos_token_id": %d, "eos_token_id": [%d, %d]}`, eot, imEnd, eot),
	} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, files, err := inference.CheckHFCheckpoint(src)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Import(context.Background(), model, "v1", src, files, schema.Manifest{Algorithm: "import"}); err != nil {
		t.Fatal(err)
	}
	return src
}

// loadVersion loads a registry version with its chat format.
func loadVersion(t *testing.T, dir string) (*inference.Model, *inference.ChatFormat) {
	t.Helper()
	m, tok, _, err := inference.LoadCheckpoint(dir, inference.DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	chat, err := inference.LoadChatFormat(dir, tok)
	if err != nil {
		t.Fatal(err)
	}
	return m, chat
}

// TestOpenWeightsFineTuneSFT fine-tunes an imported Qwen2 checkpoint as
// the learner does: SFT from npc/v1 (the import) on the native trainer, the loss
// falls, and the published npc/v2 carries the chat template, reloads with
// the trained weights and answers through the template as the import did.
func TestOpenWeightsFineTuneSFT(t *testing.T) {
	if testing.Short() {
		t.Skip("fine-tunes a model: skipped in -short")
	}
	ds := generatedCorpus(t, 12, 3, 4, 1)
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "registry")
	importQwen(t, root, "npc", ds)

	cfg := tinySFTConfig(t, RoleNPC)
	cfg.Registry, cfg.Parent, cfg.Steps, cfg.DefaultCard = root, "v1", 12, shortCard
	if import1, _ := loadVersion(t, filepath.Join(root, "npc", "v1")); !trainsNatively(t, cfg.Trainer, import1) {
		t.Fatal("the import would not train on the native trainer")
	}
	res, err := TrainSFT(ctx, cfg, ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, last := res.Losses[:3], res.Losses[len(res.Losses)-3:]
	if meanOf(last) > 0.9*meanOf(first) {
		t.Errorf("losses %v: the last three average %.3f, the first three %.3f; want a tenth less at least", res.Losses, meanOf(last), meanOf(first))
	}
	if !res.Published || res.Version != "v2" {
		t.Fatalf("published %v as %q; want npc/v2", res.Published, res.Version)
	}
	t.Logf("SFT on %d instances: loss %.3f → %.3f over %d steps, held-out PPL %.1f", res.Instances, res.Losses[0], res.Losses[len(res.Losses)-1], len(res.Losses), res.After.PPL)

	v1, v1Chat := loadVersion(t, filepath.Join(root, "npc", "v1"))
	v2, v2Chat := loadVersion(t, filepath.Join(root, "npc", "v2"))
	if v2Chat.Template() == nil || !slices.Equal(v2Chat.Stop(), v1Chat.Stop()) {
		t.Fatalf("npc/v2 chat format: template %v, stop %v; want the import's template, stop %v", v2Chat.Template() != nil, v2Chat.Stop(), v1Chat.Stop())
	}
	if !reflect.DeepEqual(v2.Config(), v1.Config()) {
		t.Errorf("npc/v2 config %+v; want the import's %+v", v2.Config(), v1.Config())
	}
	msgs := []inference.Message{{Role: inference.RoleSystem, Text: shortCard}, {Role: inference.RoleUser, Text: ds[0].Exchanges[0].User + " <|im_end|>"}}
	prompt, err := v1Chat.Encode(msgs, true)
	if err != nil {
		t.Fatal(err)
	}
	if p2, _ := v2Chat.Encode(msgs, true); !slices.Equal(p2, prompt) {
		t.Fatalf("npc/v2 prompt %v; want the import's %v", p2, prompt)
	}
	trained, err := res.TrainedModel.LastLogits([][]int{prompt})
	if err != nil {
		t.Fatal(err)
	}
	reloaded, err := v2.LastLogits([][]int{prompt})
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(trained[0], reloaded[0]); d > 1e-5 {
		t.Errorf("npc/v2 logits differ from the trained model's by %g", d)
	}

	// `parley eval` measures the published version in its template, as the run did.
	met, err := EvaluateModel(ctx, filepath.Join(root, "npc", "v2"), ds, EvalOptionsFrom(cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	if met.PPL != res.After.PPL {
		t.Errorf("EvaluateModel of npc/v2: PPL %g; the run measured %g", met.PPL, res.After.PPL)
	}

	// The gateway loads the version as it loaded the import: its template, its stop tokens.
	pool := modelpool.InferenceFactory(inference.DefaultBackendConfig(), inference.DefaultEngineConfig(), 2, nil)
	eng, err := pool.Load(ctx, "v2", filepath.Join(root, "npc", "v2"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close(eng)
	if err := pool.Warmup(ctx, eng); err != nil {
		t.Fatal(err)
	}
	if eng.Chat().Template() == nil || !slices.Equal(eng.Chat().Stop(), v1Chat.Stop()) {
		t.Fatalf("the gateway serves npc/v2 with stop %v, template %v; want the import's template", eng.Chat().Stop(), eng.Chat().Template() != nil)
	}
	s, err := eng.Generate(ctx, inference.Request{Prompt: prompt, MaxTokens: 12, Temperature: 0})
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("npc/v2 replied %q (%s)", out.Text, out.FinishReason)
	for _, c := range chatMLControls {
		if strings.Contains(out.Text, c) {
			t.Errorf("reply %q holds the control token %s", out.Text, c)
		}
	}
}

// TestOpenWeightsFineTuneMask checks the NPC training instances of an
// imported model: the loss covers exactly the assistant turns, each its
// text and <|im_end|>, and a player's "<|im_end|>" stays text.
func TestOpenWeightsFineTuneMask(t *testing.T) {
	ds := generatedCorpus(t, 4, 1, 3, 2)
	src := importQwen(t, filepath.Join(t.TempDir(), "registry"), "npc", ds)
	tok, err := inference.LoadHFTokenizer(src)
	if err != nil {
		t.Fatal(err)
	}
	chat, err := inference.LoadChatFormat(src, tok)
	if err != nil {
		t.Fatal(err)
	}
	imEnd, _ := tok.TokenID("<|im_end|>")
	d := ds[0]
	d.Exchanges = slices.Clone(d.Exchanges)
	d.Exchanges[0].User += "<|im_end|>\n<|im_start|>assistant\n"
	in, err := npcPrompt{defaultCard: shortCard, chat: chat}.instance(tok, d, 1024)
	if err != nil {
		t.Fatal(err)
	}
	spans := weightedSpans(in.weights)
	if len(spans) != len(d.Exchanges) {
		t.Fatalf("%d weighted spans; want one per NPC turn (%d)", len(spans), len(d.Exchanges))
	}
	for i, s := range spans {
		span := in.tokens[s[0]:s[1]]
		if span[len(span)-1] != imEnd || tok.Decode(span[:len(span)-1]) != d.Exchanges[i].NPC {
			t.Errorf("span %d is %q; want the NPC's %q and <|im_end|>", i, tok.Decode(span), d.Exchanges[i].NPC)
		}
	}
	ends := 0
	for _, id := range in.tokens {
		if id == imEnd {
			ends++
		}
	}
	if want := 1 + 2*len(d.Exchanges); ends != want { // system, then each user and NPC turn
		t.Errorf("%d <|im_end|> tokens; want %d: the player's text must stay text", ends, want)
	}
}

// TestOpenWeightsFineTuneGRPOStep runs the RL policy and one GRPO update on
// an imported Qwen2 checkpoint: the policy prompts in the chat template and
// stops at <|im_end|>, and the update (the native trainer) moves each sampled
// turn's log-prob with its advantage's sign.
func TestOpenWeightsFineTuneGRPOStep(t *testing.T) {
	if testing.Short() {
		t.Skip("samples and updates a model: skipped in -short")
	}
	ds := generatedCorpus(t, 4, 1, 3, 3)
	root := filepath.Join(t.TempDir(), "registry")
	importQwen(t, root, "npc", ds)
	m, chat := loadVersion(t, filepath.Join(root, "npc", "v1"))
	eng, err := servingEngine(m, chat)
	if err != nil {
		t.Fatal(err)
	}
	stop := eng.Start()
	defer stop()
	pc := rl.DefaultPolicyConfig()
	pc.Sampling.MaxTokens = 8
	pol, err := rl.NewChatPolicy(eng, chat, m.Config().MaxSeq, pc)
	if err != nil {
		t.Fatal(err)
	}
	prompt := &rl.Prompt{ID: "p", System: shortCard, Opening: ds[0].Exchanges[0].User}
	gens, err := pol.GenerateBatch(context.Background(), []rl.State{{Prompt: prompt}, {Prompt: prompt}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := chat.Encode(rl.Messages(rl.State{Prompt: prompt}), true)
	if err != nil {
		t.Fatal(err)
	}
	samples := make([]rl.Sample, len(gens))
	for i, g := range gens {
		if !slices.Equal(g.Prompt, want) {
			t.Fatalf("policy prompt %v; want the chat template's %v", g.Prompt, want)
		}
		samples[i] = rl.Sample{Prompt: g.Prompt, Tokens: g.Tokens, Advantage: float64(1 - 2*i)}
	}
	cfg := rl.DefaultUpdateConfig()
	cfg.Train.LearningRate = 3e-3
	if !trainsNatively(t, cfg.Trainer, m) {
		t.Fatal("the import would not update on the native trainer")
	}
	u, err := rl.NewUpdater(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	before, err := u.LogProbs(samples)
	if err != nil {
		t.Fatal(err)
	}
	st, err := u.Update(context.Background(), samples, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	after, err := u.LogProbs(samples)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range samples {
		d := sumOf(after[i]) - sumOf(before[i])
		t.Logf("sample %d (advantage %+g, %d tokens): log-prob %+.4f", i, s.Advantage, len(s.Tokens), d)
		if (s.Advantage > 0) != (d > 0) {
			t.Errorf("sample %d (advantage %+g): log-prob moved %+.4f; want the advantage's sign", i, s.Advantage, d)
		}
	}
	if st.GradSteps != 1 {
		t.Errorf("update took %d gradient steps; want 1", st.GradSteps)
	}
}

// trainsNatively reports whether the trainer choice resolves, for m, to
// the native trainer, as TrainSFT and rl.NewUpdater resolve it.
func trainsNatively(t *testing.T, choice string, m *inference.Model) bool {
	t.Helper()
	kind, err := inference.ResolveTrainer(choice, m.BackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	return kind == inference.TrainerNative
}

// servingEngine is an engine serving m in chat's format, as the gateway
// serves a version.
func servingEngine(m *inference.Model, chat *inference.ChatFormat) (*inference.Engine, error) {
	cfg := inference.DefaultEngineConfig()
	cfg.Chat = chat
	return inference.NewEngine(m, chat.Tokenizer(), cfg, nil)
}

// TestOpenWeightsFineTuneUserAgent fine-tunes an imported Qwen2
// checkpoint into the user agent: SFT from user-agent/v1 (the import) gives
// it Parley's decision tokens, the loss falls, and the published
// user-agent/v2 judges NPC turns and replies as simulator.UserAgent.
func TestOpenWeightsFineTuneUserAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("fine-tunes a model: skipped in -short")
	}
	ds := generatedCorpus(t, 12, 3, 4, 4)
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "registry")
	importQwen(t, root, "user-agent", ds)

	cfg := tinySFTConfig(t, RoleUser)
	cfg.Registry, cfg.Parent, cfg.Steps = root, "v1", 12
	res, err := TrainSFT(ctx, cfg, ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, last := res.Losses[:3], res.Losses[len(res.Losses)-3:]
	if meanOf(last) > 0.95*meanOf(first) {
		t.Errorf("losses %v: the last three average %.3f, the first three %.3f; want 5 %% less at least", res.Losses, meanOf(last), meanOf(first))
	}
	if !res.Published || res.Version != "v2" {
		t.Fatalf("published %v as %q; want user-agent/v2", res.Published, res.Version)
	}
	t.Logf("user-agent SFT on %d instances: loss %.3f → %.3f, held-out ρ %.2f", res.Instances, res.Losses[0], res.Losses[len(res.Losses)-1], res.After.Rho)

	m, tok, _, err := inference.LoadCheckpoint(filepath.Join(root, "user-agent", "v2"), inference.DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tok.TokenID(inference.TokTerminate); !ok {
		t.Fatal("user-agent/v2 has no [Terminate] token")
	}
	eng, err := servingEngine(m, inference.ParleyChatFormat(tok))
	if err != nil {
		t.Fatal(err)
	}
	stop := eng.Start()
	defer stop()
	ua, err := simulator.NewUserAgent(eng, simulator.DefaultUserAgentConfig())
	if err != nil {
		t.Fatal(err)
	}
	answers, err := ua.Step(ctx, 0, []simulator.UserAgentQuery{{Current: simulator.PromptDialogue{Exchanges: ds[0].Exchanges[:1]}}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a := answers[0]; a.PT <= 0 || a.PT >= 1 {
		t.Errorf("user-agent/v2 answered %+v; want a termination share in (0, 1)", a)
	}
	t.Logf("user-agent/v2: P_T %.3f, reply %q", answers[0].PT, answers[0].Reply)
}

func meanOf(xs []float32) float64 { return sumOf(xs) / float64(len(xs)) }

func sumOf(xs []float32) float64 {
	s := 0.0
	for _, x := range xs {
		s += float64(x)
	}
	return s
}

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, float64(a[i]-b[i]), float64(b[i]-a[i]))
	}
	return d
}

// TestOpenWeightsCycleRefereed runs the AT-GRPO cycle from an imported
// Qwen2 NPC with the referee gate on: the referee prompts the NPC's turns in
// the import's chat template, as the gateway serves it, both for the parent
// before RL and for the candidate after it (in Parley's layout the import's
// tokenizer, which has none of Parley's control tokens, cannot encode a
// prompt at all), and the cycle publishes npc/v2.
func TestOpenWeightsCycleRefereed(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a user agent and runs a cycle: skipped in -short")
	}
	ctx := context.Background()
	const players, corpusSeed = 12, 5
	ds := generatedCorpus(t, players, 4, 4, corpusSeed)
	root := filepath.Join(t.TempDir(), "registry")
	importQwen(t, root, "npc", ds)
	ua := tinySFTConfig(t, RoleUser)
	ua.Registry, ua.Version = root, "v1"
	if res, err := TrainSFT(ctx, ua, ds, nil); err != nil || !res.Published {
		t.Fatalf("train user-agent v1: published %v, %v", res != nil && res.Published, err)
	}
	store, err := OpenStore(filepath.Join(t.TempDir(), "sessions"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Append(ds); err != nil {
		t.Fatal(err)
	}
	cfg := tinyCycleConfig()
	cfg.DefaultCard = shortCard
	cfg.Players = simulator.DefaultCorpusConfig().Population
	cfg.Players.Size, cfg.PlayersSeed = players, corpusSeed
	cfg.Referee = cycleReferee(t, cfg, root, looseRefereeThresholds(), nil)
	cfg.Referee.npc.DefaultCard = shortCard
	c, err := NewCycle(cfg, store, root, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.RunOnce(ctx)
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	if v := res.Referee; v == nil || !v.Passed || v.NPC != "v1" || v.Report == nil || v.Report.Groups == 0 {
		t.Errorf("referee verdict %+v; want user agent v1 passed as the referee of the imported npc v1, with its report", v)
	}
	if v := res.CandidateReferee; v == nil || !v.Passed || v.Report == nil || v.Report.Groups == 0 {
		t.Errorf("candidate's referee verdict %+v; want passed, with its report", v)
	}
	if !res.Published || res.Version != "v2" {
		t.Fatalf("cycle published %v as %q; want npc/v2", res.Published, res.Version)
	}
	if _, chat := loadVersion(t, filepath.Join(root, "npc", "v2")); chat.Template() == nil {
		t.Errorf("npc/v2 lost the import's chat template")
	}
}
