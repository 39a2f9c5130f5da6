package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchSummary(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"inference.json": `{"decoder":"cpu","prefill_tokens_per_sec":12000,"decode":[{"batch":1,"tokens_per_sec":5000,"fraction_of_sgemm":0.05}],"batch32_speedup":2.1}`,
		"gateway.json":   `{"points":[],"concurrency":[{"sessions":64,"bare_rps":4000,"gateway_rps":1500,"gateway_rps_logging":1440,"logging_cost":0.04}]}`,
		"rollout.json":   `{"promote_ms":{"p50":43,"max":106},"steady_latency_ms":{"p95":58},"swap_latency_ms":{"p95":73},"requests":1306,"failed":0}`,
		"turns.json":     `{"points":[{"players":8,"whole":{"latency_ms":{"p95":191.5}},"kept":{"latency_ms":{"p95":48.9}},"p95_ratio":0.30}]}`,
		"ab.json":        `{"aa_false_positive_rate":0.012,"aa_false_positive_rate_session_level":0.41,"ci_coverage":0.99,"power":1,"cuped_variance_ratio":0.641}`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := writeBenchSummary(&out, dir); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"decode tokens/s, batch 1", "5000 (5.0 % of sgemm)", "batch-32 / batch-1", "43 / 106 ms", "0 of 1306", "64 sessions: gateway ÷ bare, logging cost", "0.38, 4.0 %",
		"8 players: exchange p95 whole prompts / kept prefixes", "192 / 49 ms (0.30×)",
		"A/A false positives, player / session level", "0.012 / 0.410", "CUPED variance ratio", "0.641"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if err := writeBenchSummary(&out, t.TempDir()); err == nil {
		t.Error("summary of an empty dir succeeded; want an error")
	}
	if err := os.WriteFile(filepath.Join(dir, "gateway.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeBenchSummary(&out, dir); err == nil || !strings.Contains(err.Error(), "gateway.json") {
		t.Errorf("summary with a broken gateway.json = %v; want an error naming it", err)
	}
}
