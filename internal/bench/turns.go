package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/parleyhq/parley/inference"
)

// TurnsConfig configures RunTurns: players holding conversations with one
// engine at the same time, each turn's prompt the last one plus the reply
// and the player's next line, behind a persona card every player shares.
type TurnsConfig struct {
	// Checkpoint, when set, is the registry version directory served;
	// otherwise a random model of Model.
	Checkpoint string                  `json:"checkpoint,omitempty"`
	Model      inference.ModelConfig   `json:"model"`
	Backend    inference.BackendConfig `json:"backend"`
	// Players are the numbers of concurrent players measured.
	Players []int `json:"players"`
	// Turns per conversation; CardTokens, LineTokens and ReplyTokens size
	// the shared card, each player line and each reply.
	Turns       int `json:"turns"`
	CardTokens  int `json:"card_tokens"`
	LineTokens  int `json:"line_tokens"`
	ReplyTokens int `json:"reply_tokens"`
	// Think is the most a player waits between a reply and its next line
	// (uniform from 0).
	Think time.Duration `json:"think"`
	// PrefixCacheMB is the kept-sequence memory of the engine compared
	// with one that keeps none (inference.EngineConfig.PrefixCacheMB).
	PrefixCacheMB int `json:"prefix_cache_mb"`
	// Rounds interleave the two engines at every player count.
	Rounds int   `json:"rounds"`
	Seed   int64 `json:"seed"`
}

// DefaultTurnsConfig holds 8-turn conversations of the loop's shape (a
// 150-token card, 15-token lines, 25-token replies, up to 1 s between
// turns) with 4, 8 and 16 players, in 3 rounds.
func DefaultTurnsConfig() TurnsConfig {
	return TurnsConfig{
		Model: inference.DefaultModelConfig(), Backend: inference.DefaultBackendConfig(),
		Players: []int{4, 8, 16}, Turns: 8, CardTokens: 150, LineTokens: 15, ReplyTokens: 25,
		Think: time.Second, PrefixCacheMB: inference.DefaultEngineConfig().PrefixCacheMB, Rounds: 3, Seed: 1,
	}
}

// Validate reports a configuration RunTurns cannot run.
func (c TurnsConfig) Validate() error {
	switch {
	case len(c.Players) == 0 || slices.Min(c.Players) < 1:
		return errors.New("bench turns: player counts must be positive")
	case c.Turns < 2 || c.CardTokens < 1 || c.LineTokens < 1 || c.ReplyTokens < 1:
		return fmt.Errorf("bench turns: %d turns of a %d-token card, %d-token lines, %d-token replies: too few", c.Turns, c.CardTokens, c.LineTokens, c.ReplyTokens)
	case c.Think < 0 || c.Rounds < 1 || c.PrefixCacheMB < 1:
		return fmt.Errorf("bench turns: think %v, %d rounds, prefix cache %d MB", c.Think, c.Rounds, c.PrefixCacheMB)
	}
	return nil
}

// longest is the most tokens a conversation holds: its last prompt and
// reply.
func (c TurnsConfig) longest() int {
	return c.CardTokens + c.Turns*(c.LineTokens+c.ReplyTokens)
}

// TurnsReport is what RunTurns measured: per player count, the exchange
// latency (Generate to the last token) of the engine that prefills whole
// prompts and of the one that keeps sequences. Points hold the medians over
// the rounds of the p50, the p95, the reused share and the ratios; Rounds
// each round's figures.
type TurnsReport struct {
	Config TurnsConfig    `json:"config"`
	Params int            `json:"params"`
	Points []TurnsPoint   `json:"points"`
	Rounds [][]TurnsPoint `json:"rounds"`
}

// TurnsPoint compares the two engines at one player count.
type TurnsPoint struct {
	Players int      `json:"players"`
	Whole   TurnsArm `json:"whole"`
	Kept    TurnsArm `json:"kept"`
	// P50Ratio and P95Ratio are kept ÷ whole.
	P50Ratio float64 `json:"p50_ratio"`
	P95Ratio float64 `json:"p95_ratio"`
}

// TurnsArm is one engine's exchanges at one player count.
type TurnsArm struct {
	Latency Summary `json:"latency_ms"`
	// ReusedShare is the prompt tokens copied from kept sequences over
	// all prompt tokens.
	ReusedShare float64 `json:"reused_share"`
}

// RunTurns measures, in cfg.Rounds interleaved rounds, conversations on an
// engine that prefills every prompt whole and on one that keeps finished
// sequences, prints a table to w and returns the report.
func RunTurns(ctx context.Context, cfg TurnsConfig, w io.Writer) (TurnsReport, error) {
	if err := cfg.Validate(); err != nil {
		return TurnsReport{}, err
	}
	var (
		m   *inference.Model
		err error
	)
	if cfg.Checkpoint != "" {
		m, _, _, err = inference.LoadCheckpoint(cfg.Checkpoint, cfg.Backend)
	} else {
		m, err = inference.NewModel(cfg.Model, cfg.Backend, cfg.Seed)
	}
	if err != nil {
		return TurnsReport{}, fmt.Errorf("bench turns: %w", err)
	}
	mc := m.Config()
	if cfg.longest() > mc.MaxSeq {
		return TurnsReport{}, fmt.Errorf("bench turns: conversations of %d tokens exceed the model's %d", cfg.longest(), mc.MaxSeq)
	}
	// The prompts are random ids: any tokenizer within the vocabulary
	// serves the engine.
	tok, err := inference.TrainTokenizer([]string{"bench"}, 300)
	if err != nil {
		return TurnsReport{}, fmt.Errorf("bench turns: %w", err)
	}
	rep := TurnsReport{Config: cfg, Params: mc.Params()}
	for r := range cfg.Rounds {
		var round []TurnsPoint
		for i, n := range cfg.Players {
			seed := uint64(cfg.Seed)*1000 + uint64(r*len(cfg.Players)+i)
			pt := TurnsPoint{Players: n}
			// Alternate which engine goes first.
			for k := range 2 {
				keep := (k+r)%2 == 1
				arm, err := turnsArm(ctx, m, tok, cfg, n, keep, seed)
				if err != nil {
					return rep, err
				}
				if keep {
					pt.Kept = arm
				} else {
					pt.Whole = arm
				}
			}
			pt.P50Ratio = pt.Kept.Latency.P50 / pt.Whole.Latency.P50
			pt.P95Ratio = pt.Kept.Latency.P95 / pt.Whole.Latency.P95
			round = append(round, pt)
		}
		rep.Rounds = append(rep.Rounds, round)
	}
	for i, n := range cfg.Players {
		med := func(f func(TurnsPoint) float64) float64 {
			xs := make([]float64, len(rep.Rounds))
			for r, round := range rep.Rounds {
				xs[r] = f(round[i])
			}
			return median(xs)
		}
		arm := func(of func(TurnsPoint) TurnsArm) TurnsArm {
			return TurnsArm{
				Latency: Summary{
					P50: med(func(p TurnsPoint) float64 { return of(p).Latency.P50 }),
					P95: med(func(p TurnsPoint) float64 { return of(p).Latency.P95 }),
				},
				ReusedShare: med(func(p TurnsPoint) float64 { return of(p).ReusedShare }),
			}
		}
		rep.Points = append(rep.Points, TurnsPoint{
			Players:  n,
			Whole:    arm(func(p TurnsPoint) TurnsArm { return p.Whole }),
			Kept:     arm(func(p TurnsPoint) TurnsArm { return p.Kept }),
			P50Ratio: med(func(p TurnsPoint) float64 { return p.P50Ratio }),
			P95Ratio: med(func(p TurnsPoint) float64 { return p.P95Ratio }),
		})
	}
	printTurns(w, rep)
	return rep, nil
}

// turnsArm runs players conversations at once on a fresh engine, keeping
// sequences or not, and returns their exchanges' latencies.
func turnsArm(ctx context.Context, m *inference.Model, tok *inference.Tokenizer, cfg TurnsConfig, players int, keep bool, seed uint64) (TurnsArm, error) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	ecfg := inference.DefaultEngineConfig()
	ecfg.Meter = mp.Meter("bench-turns")
	if keep {
		ecfg.PrefixCacheMB = cfg.PrefixCacheMB
	} else {
		ecfg.PrefixCacheMB = 0
	}
	e, err := inference.NewEngine(m, tok, ecfg, nil)
	if err != nil {
		return TurnsArm{}, fmt.Errorf("bench turns: %w", err)
	}
	stop := e.Start()
	defer stop()
	V := m.Config().VocabSize
	rng := rand.New(rand.NewPCG(seed, 11))
	randomTokens := func(rng *rand.Rand, n int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = 8 + rng.IntN(V-8)
		}
		return p
	}
	card := randomTokens(rng, cfg.CardTokens)
	var (
		mu        sync.Mutex
		latencies []time.Duration
		firstErr  error
		wg        sync.WaitGroup
	)
	for p := range players {
		prng := rand.New(rand.NewPCG(seed, uint64(100+p)))
		wg.Go(func() {
			prompt := slices.Clone(card)
			for range cfg.Turns {
				if cfg.Think > 0 {
					time.Sleep(time.Duration(prng.Int64N(int64(cfg.Think))))
				}
				prompt = append(prompt, randomTokens(prng, cfg.LineTokens)...)
				start := time.Now()
				st, err := e.Generate(ctx, inference.Request{Prompt: prompt, MaxTokens: cfg.ReplyTokens, Temperature: 1, Stop: []int{}, Seed: prng.Uint64() | 1})
				var res inference.Result
				if err == nil {
					res, err = st.Wait()
				}
				took := time.Since(start)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				latencies = append(latencies, took)
				mu.Unlock()
				if err != nil {
					return
				}
				prompt = append(prompt, res.Tokens...)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return TurnsArm{}, fmt.Errorf("bench turns: %w", firstErr)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		return TurnsArm{}, fmt.Errorf("bench turns: metrics: %w", err)
	}
	sums := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if s, ok := mt.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range s.DataPoints {
					sums[mt.Name] += dp.Value
				}
			}
		}
	}
	arm := TurnsArm{Latency: summarize(latencies)}
	if all := sums["parley.inference.prompt_tokens"]; all > 0 {
		arm.ReusedShare = float64(sums["parley.inference.prompt_tokens_reused"]) / float64(all)
	}
	return arm, nil
}

func printTurns(w io.Writer, r TurnsReport) {
	c := r.Config
	fmt.Fprintf(w, "%d-turn conversations (%d-token card, %d-token lines, %d-token replies, think up to %v), %d params, medians of %d rounds\n",
		c.Turns, c.CardTokens, c.LineTokens, c.ReplyTokens, c.Think, r.Params, c.Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "players\twhole p50 ms\twhole p95 ms\tkept p50 ms\tkept p95 ms\tkept reused\tp50 kept÷whole\tp95 kept÷whole\t")
	for _, p := range r.Points {
		fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f %%\t%.2f\t%.2f\t\n", p.Players,
			p.Whole.Latency.P50, p.Whole.Latency.P95, p.Kept.Latency.P50, p.Kept.Latency.P95, 100*p.Kept.ReusedShare, p.P50Ratio, p.P95Ratio)
	}
	_ = tw.Flush()
}
