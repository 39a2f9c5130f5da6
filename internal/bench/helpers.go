package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/rollout/abtest"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// Summary describes a sample of durations in milliseconds; the percentiles
// are abtest.Percentile's.
type Summary struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// summarize describes ds; an empty sample gives the zero Summary.
func summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	ms := make([]float64, len(ds))
	var sum float64
	for i, d := range ds {
		ms[i] = millis(d)
		sum += ms[i]
	}
	return Summary{N: len(ms), Mean: sum / float64(len(ms)), P50: abtest.Percentile(ms, 50),
		P95: abtest.Percentile(ms, 95), P99: abtest.Percentile(ms, 99), Max: slices.Max(ms)}
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// randomHex returns n random bytes in hex, for key prefixes.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// deletePrefix removes every Redis key under prefix.
func deletePrefix(rdb redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for chunk := range slices.Chunk(keys, 500) {
		_ = rdb.Del(ctx, chunk...).Err()
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartEngine starts an engine on the checkpoint at dir, or on a random
// default-size model with a tokenizer trained on a generated corpus; stop
// ends it.
func StartEngine(ctx context.Context, dir string) (e *inference.Engine, stop func(), err error) {
	var (
		m   *inference.Model
		tok *inference.Tokenizer
	)
	if dir != "" {
		m, tok, _, err = inference.LoadCheckpoint(dir, inference.DefaultBackendConfig())
	} else {
		m, tok, err = randomModel(ctx)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("bench engine: %w", err)
	}
	e, err = inference.NewEngine(m, tok, inference.DefaultEngineConfig(), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("bench engine: %w", err)
	}
	return e, e.Start(), nil
}

// randomModel is a random default-size model (seed 1) with a tokenizer
// trained on a small generated corpus.
func randomModel(ctx context.Context) (*inference.Model, *inference.Tokenizer, error) {
	cc := simulator.DefaultCorpusConfig()
	cc.Players, cc.DialoguesPerPlayer = 50, 3
	var buf bytes.Buffer
	if _, err := simulator.GenerateCorpus(ctx, cc, &buf); err != nil {
		return nil, nil, err
	}
	ds, err := simulator.ReadCorpus(&buf)
	if err != nil {
		return nil, nil, err
	}
	var texts []string
	for _, d := range ds {
		for _, x := range d.Exchanges {
			texts = append(texts, x.User, x.NPC)
		}
	}
	tok, err := inference.TrainTokenizer(texts, inference.DefaultModelConfig().VocabSize)
	if err != nil {
		return nil, nil, fmt.Errorf("tokenizer: %w", err)
	}
	mc := inference.DefaultModelConfig()
	mc.VocabSize = tok.VocabSize()
	m, err := inference.NewModel(mc, inference.DefaultBackendConfig(), 1)
	if err != nil {
		return nil, nil, fmt.Errorf("model: %w", err)
	}
	return m, tok, nil
}

// publish saves m and tok as version of model "npc" in buildDir, publishes
// it into reg and removes buildDir.
func publish(ctx context.Context, reg *registry.Local, version string, m *inference.Model, tok *inference.Tokenizer, buildDir string) error {
	if err := os.RemoveAll(buildDir); err != nil {
		return err
	}
	man := schema.Manifest{Model: "npc", Version: version, Algorithm: "random-init"}
	if err := inference.SaveCheckpoint(buildDir, m, tok, man); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", version, err)
	}
	if _, err := reg.Publish(ctx, "npc", version, buildDir); err != nil {
		return fmt.Errorf("publish %s: %w", version, err)
	}
	return os.RemoveAll(buildDir)
}
