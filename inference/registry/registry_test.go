package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/parleyhq/parley/schema"
)

// writeVersion writes files and a manifest listing their sha256 into a new
// directory and returns it.
func writeVersion(t *testing.T, model, version string, created time.Time, metrics map[string]float64, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), version)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := schema.Manifest{
		Model: model, Version: version, Algorithm: "at-grpo", Metrics: metrics,
		Files: map[string]string{}, CreatedAt: created,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(body))
		m.Files[name] = hex.EncodeToString(sum[:])
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func testFiles(tag string) map[string]string {
	return map[string]string{"config.json": `{"tag":"` + tag + `"}`, "model.safetensors": "weights " + tag}
}

func newStore(t *testing.T) *Local {
	t.Helper()
	s, err := NewLocal(filepath.Join(t.TempDir(), "registry"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPublishListFetch(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	// Published out of order: List sorts by CreatedAt.
	v2 := writeVersion(t, "npc", "v2", t0.Add(time.Hour), map[string]float64{"avg_l": 6.5}, testFiles("2"))
	v1 := writeVersion(t, "npc", "v1", t0, map[string]float64{"avg_l": 5}, testFiles("1"))
	for _, p := range []struct{ version, dir string }{{"v2", v2}, {"v1", v1}} {
		if _, err := s.Publish(ctx, "npc", p.version, p.dir); err != nil {
			t.Fatalf("Publish(%s): %v", p.version, err)
		}
	}
	list, err := s.List(ctx, "npc")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range list {
		got = append(got, m.Version)
	}
	if len(got) != 2 || got[0] != "v1" || got[1] != "v2" {
		t.Errorf("List versions = %v; want [v1 v2]", got)
	}
	models, err := s.Models(ctx)
	if err != nil || len(models) != 1 || models[0] != "npc" {
		t.Errorf("Models = %v, %v; want [npc]", models, err)
	}
	if l, err := s.List(ctx, "nobody"); err != nil || len(l) != 0 {
		t.Errorf("List(unknown model) = %v, %v; want empty, nil", l, err)
	}

	m, err := s.Manifest(ctx, "npc", "v2")
	if err != nil {
		t.Fatal(err)
	}
	if m.Metrics["avg_l"] != 6.5 {
		t.Errorf("Manifest(v2).Metrics = %v; want avg_l 6.5", m.Metrics)
	}
	if _, err := s.Manifest(ctx, "npc", "v9"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Manifest(v9) error = %v; want ErrNotFound", err)
	}
	if _, err := s.Manifest(ctx, "npc", "../npc/v1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Manifest(path traversal) error = %v; want ErrNotFound", err)
	}

	dst := filepath.Join(t.TempDir(), "fetched")
	if _, err := s.Fetch(ctx, "npc", "v1", dst); err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if m, err := readManifest(dst); err != nil || m.Version != "v1" {
		t.Errorf("fetched manifest = %+v, %v; want version v1", m, err)
	}
	for name, want := range testFiles("1") {
		b, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(b) != want {
			t.Errorf("fetched %s = %q, %v; want %q", name, b, err, want)
		}
	}
	if _, err := s.Verify(ctx, "npc", "v2"); err != nil {
		t.Errorf("Verify(v2): %v", err)
	}
}

func TestPublishRefusesOverwrite(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.Publish(ctx, "npc", "v1", writeVersion(t, "npc", "v1", t0, nil, testFiles("1"))); err != nil {
		t.Fatal(err)
	}
	other := writeVersion(t, "npc", "v1", t0, nil, testFiles("other"))
	if _, err := s.Publish(ctx, "npc", "v1", other); !errors.Is(err, ErrExists) {
		t.Errorf("second Publish(v1) error = %v; want ErrExists", err)
	}
	b, _ := os.ReadFile(filepath.Join(s.Dir("npc", "v1"), "model.safetensors"))
	if string(b) != "weights 1" {
		t.Errorf("v1 weights after refused overwrite = %q; want %q", b, "weights 1")
	}
}

func TestConcurrentPublishOneWins(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	const n = 8
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = writeVersion(t, "npc", "v1", t0, nil, testFiles(string(rune('a'+i))))
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { _, errs[i] = s.Publish(ctx, "npc", "v1", dirs[i]) })
	}
	wg.Wait()
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrExists):
			t.Errorf("Publish %d error = %v; want nil or ErrExists", i, err)
		}
	}
	if ok != 1 {
		t.Errorf("%d concurrent publishes of v1 succeeded; want exactly 1", ok)
	}
	if _, err := s.Verify(ctx, "npc", "v1"); err != nil {
		t.Errorf("Verify after concurrent publishes: %v", err)
	}
}

func TestRefusesCorruptVersion(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		corrupt func(t *testing.T, dir string)
	}{
		{"flipped byte", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			b, _ := os.ReadFile(p)
			b[0] ^= 1
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"missing file", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "config.json")); err != nil {
				t.Fatal(err)
			}
		}},
		{"unlisted file", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "extra.bin"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run("publish/"+tt.name, func(t *testing.T) {
			s := newStore(t)
			src := writeVersion(t, "npc", "v1", t0, nil, testFiles("1"))
			tt.corrupt(t, src)
			if _, err := s.Publish(ctx, "npc", "v1", src); !errors.Is(err, ErrChecksum) {
				t.Errorf("Publish(corrupt) error = %v; want ErrChecksum", err)
			}
			if _, err := os.Stat(s.Dir("npc", "v1")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("corrupt version is in the registry (stat error %v)", err)
			}
			if list, _ := s.List(ctx, "npc"); len(list) != 0 {
				t.Errorf("List after refused publish = %d versions; want 0", len(list))
			}
		})
		t.Run("stored/"+tt.name, func(t *testing.T) {
			s := newStore(t)
			if _, err := s.Publish(ctx, "npc", "v1", writeVersion(t, "npc", "v1", t0, nil, testFiles("1"))); err != nil {
				t.Fatal(err)
			}
			tt.corrupt(t, s.Dir("npc", "v1"))
			if _, err := s.Verify(ctx, "npc", "v1"); !errors.Is(err, ErrChecksum) {
				t.Errorf("Verify(corrupt) error = %v; want ErrChecksum", err)
			}
			dst := filepath.Join(t.TempDir(), "fetched")
			if _, err := s.Fetch(ctx, "npc", "v1", dst); !errors.Is(err, ErrChecksum) {
				t.Errorf("Fetch(corrupt) error = %v; want ErrChecksum", err)
			}
			if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("Fetch left a corrupt copy at dst (stat error %v)", err)
			}
		})
	}
}

func TestPublishRefusesMismatchedName(t *testing.T) {
	s := newStore(t)
	src := writeVersion(t, "npc", "v1", t0, nil, testFiles("1"))
	if _, err := s.Publish(context.Background(), "npc", "v2", src); err == nil {
		t.Error("Publish(v2) of a manifest for v1 succeeded; want an error")
	}
}

func TestDiffMetrics(t *testing.T) {
	a := schema.Manifest{Metrics: map[string]float64{"avg_l": 5, "ppl": 20, "only_a": 1, "zero": 0}}
	b := schema.Manifest{Metrics: map[string]float64{"avg_l": 6, "ppl": 18, "only_b": 2, "zero": 3}}
	// Each row: name, A, B, Delta, Rel, with "-" for nil.
	want := [][5]string{
		{"avg_l", "5", "6", "1", "0.2"},
		{"only_a", "1", "-", "-", "-"},
		{"only_b", "-", "2", "-", "-"},
		{"ppl", "20", "18", "-2", "-0.1"},
		{"zero", "0", "3", "3", "-"},
	}
	f := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatFloat(*p, 'g', 10, 64)
	}
	got := DiffMetrics(a, b)
	if len(got) != len(want) {
		t.Fatalf("DiffMetrics = %d rows; want %d", len(got), len(want))
	}
	for i, d := range got {
		row := [5]string{d.Name, f(d.A), f(d.B), f(d.Delta), f(d.Rel)}
		if row != want[i] {
			t.Errorf("DiffMetrics row %d = %v; want %v", i, row, want[i])
		}
	}
	if _, err := json.Marshal(got); err != nil {
		t.Errorf("json.Marshal(DiffMetrics) error = %v; want nil", err)
	}
}
