package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parleyhq/parley/internal/bench"
	"github.com/parleyhq/parley/internal/testenv"
)

// TestMain runs the command itself instead of the tests when
// PARLEY_TEST_MAIN is set: the soak starts its broker as a child process of
// this binary ("bench broker").
func TestMain(m *testing.M) {
	if os.Getenv("PARLEY_TEST_MAIN") != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestBenchSoakWritesSeries runs a short soak against a real Redis and a
// tiny model and checks the JSON it writes: a sample per interval, requests
// in each, no errors, and memory read from the process.
func TestBenchSoakWritesSeries(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole gateway for a few seconds")
	}
	rds := testenv.StartRedis(t)
	reg := filepath.Join(t.TempDir(), "registry")
	testenv.PublishTinyModel(t, reg, "npc", "v1")
	out := filepath.Join(t.TempDir(), "soak.json")

	t.Setenv("PARLEY_TEST_MAIN", "1") // for the broker, a child process of this binary
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log, err := run(ctx, "bench", "soak", "--redis-addr", rds.Addr, "--registry", reg,
		"--duration", "3s", "--interval", "1s", "--concurrency", "2", "--max-tokens", "4", "--out", out)
	if err != nil {
		t.Fatalf("bench soak: %v\n%s", err, log)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.SoakReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Samples) < 2 {
		t.Fatalf("samples = %d; want at least 2 (3s at 1s intervals)\n%s", len(rep.Samples), log)
	}
	if rep.Errors != 0 || rep.Requests == 0 {
		t.Errorf("requests = %d, errors = %d %v; want some requests and no errors", rep.Requests, rep.Errors, rep.ErrorKinds)
	}
	for i, s := range rep.Samples {
		if s.Requests == 0 || s.RSSMB <= 0 || s.HeapMB <= 0 || s.Goroutines == 0 || s.BrokerRSSMB <= 0 {
			t.Errorf("sample %d = %+v; want requests, rss, heap, goroutines and the broker's rss all above 0", i, s)
		}
		if s.P50Ms > s.P95Ms || s.P95Ms > s.P99Ms {
			t.Errorf("sample %d: p50 %.1f, p95 %.1f, p99 %.1f; want them in order", i, s.P50Ms, s.P95Ms, s.P99Ms)
		}
	}
}
