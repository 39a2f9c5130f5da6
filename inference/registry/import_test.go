package registry

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/parleyhq/parley/schema"
)

// TestImport publishes chosen files of a foreign directory: the version
// holds exactly those, verified, the source is untouched and the version
// numbers count up.
func TestImport(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	src := t.TempDir()
	for name, body := range map[string]string{"config.json": "{}", "model.safetensors": "weights", "README.md": "card"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files := []string{"config.json", "model.safetensors"}
	for _, want := range []string{"v1", "v2"} {
		v, err := NextVersion(ctx, s, "npc")
		if err != nil || v != want {
			t.Fatalf("NextVersion = %q, %v; want %s", v, err, want)
		}
		m, err := s.Import(ctx, "npc", v, src, files, schema.Manifest{Algorithm: "import"})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Files) != 2 || m.Model != "npc" || m.Version != v || m.CreatedAt.IsZero() {
			t.Fatalf("manifest %+v", m)
		}
		if _, err := s.Verify(ctx, "npc", v); err != nil {
			t.Fatal(err)
		}
	}
	if ents, _ := os.ReadDir(src); len(ents) != 3 {
		t.Fatalf("the source directory now holds %d files; want its 3", len(ents))
	}
	if ents, _ := os.ReadDir(s.Root()); len(ents) != 1 {
		t.Fatalf("the registry root holds %d entries; want npc only (no staging left)", len(ents))
	}
	for _, bad := range [][]string{nil, {"missing.bin"}, {"../config.json"}, {ManifestFile}} {
		if _, err := s.Import(ctx, "npc", "v9", src, bad, schema.Manifest{Algorithm: "import"}); err == nil {
			t.Errorf("Import of %q succeeded", bad)
		}
	}
}
