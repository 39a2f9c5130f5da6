package inference

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewBackendErrors(t *testing.T) {
	bogus := filepath.Join(t.TempDir(), "pjrt_c_api_cpu_plugin.so")
	if err := os.WriteFile(bogus, []byte("not a plugin"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     BackendConfig
		mention string
	}{
		{"unknown name", BackendConfig{Name: "tpu"}, "tpu"},
		{"xla without plugin", BackendConfig{Name: "xla"}, "plugin path is required"},
		{"xla relative plugin", BackendConfig{Name: "xla", PluginPath: "plugin.so"}, "absolute"},
		{"xla missing plugin", BackendConfig{Name: "xla", PluginPath: "/nonexistent/pjrt_c_api_cuda_plugin.so"}, "/nonexistent/pjrt_c_api_cuda_plugin.so"},
		// Without the xla build tag this says the backend is not compiled
		// in; with it, PJRT refuses the file.
		{"xla bogus plugin", BackendConfig{Name: "xla", PluginPath: bogus}, "xla"},
		{"go bad option", BackendConfig{Name: "go", Options: "warp_speed"}, "warp_speed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := newBackend(tc.cfg)
			if err == nil {
				b.Finalize()
				t.Fatalf("newBackend(%+v) succeeded; want an error", tc.cfg)
			}
			if tc.cfg.Name != "go" && !errors.Is(err, ErrBackend) {
				t.Errorf("newBackend(%+v) = %v; want ErrBackend", tc.cfg, err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("newBackend(%+v) = %q; want it to mention %q", tc.cfg, err, tc.mention)
			}
		})
	}
	if !xlaCompiled {
		_, err := newBackend(BackendConfig{Name: "xla", PluginPath: bogus})
		if err == nil || !strings.Contains(err.Error(), "-tags xla") {
			t.Errorf("xla without the build tag: %v; want a hint to build with -tags xla", err)
		}
	}
}
