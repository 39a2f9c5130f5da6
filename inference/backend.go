package inference

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
)

// ErrBackend is returned when the requested numeric backend cannot be started.
var ErrBackend = errors.New("inference: backend unavailable")

// BackendConfig selects the GoMLX backend a Model runs on.
type BackendConfig struct {
	// Name is "go" (GoMLX's pure-Go backend, the default) or "xla" (PJRT).
	Name string `json:"name"`
	// PluginPath is the absolute path of the PJRT plugin (.so) for "xla".
	PluginPath string `json:"plugin_path,omitempty"`
	// Options are extra comma-separated options of the "go" backend; empty
	// means "ops_sequential", which avoids the parallel-op deadlock of
	// GoMLX v0.26.0 on machines with few cores.
	Options string `json:"options,omitempty"`
}

// DefaultBackendConfig returns the pure-Go backend.
func DefaultBackendConfig() BackendConfig { return BackendConfig{Name: "go"} }

// Validate reports a backend configuration that cannot work.
func (c BackendConfig) Validate() error {
	switch c.Name {
	case "", "go":
		return nil
	case "xla":
		if c.PluginPath == "" {
			return fmt.Errorf("backend xla: a PJRT plugin path is required: %w", ErrBackend)
		}
		return nil
	default:
		return fmt.Errorf("backend %q: want \"go\" or \"xla\": %w", c.Name, ErrBackend)
	}
}

// newBackend starts the configured backend. The backend is always chosen
// explicitly: GoMLX's own default would pick XLA whenever it is linked and
// then try to download a plugin.
func newBackend(c BackendConfig) (backends.Backend, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch c.Name {
	case "", "go":
		opts := c.Options
		if opts == "" {
			opts = "ops_sequential"
		}
		b, err := simplego.New(opts)
		if err != nil {
			return nil, fmt.Errorf("start backend go:%s: %w", opts, err)
		}
		return b, nil
	default: // "xla"
		if !filepath.IsAbs(c.PluginPath) {
			return nil, fmt.Errorf("backend xla: plugin path %q must be absolute: %w", c.PluginPath, ErrBackend)
		}
		if _, err := os.Stat(c.PluginPath); err != nil {
			return nil, fmt.Errorf("backend xla: PJRT plugin %q not found (%w): %w", c.PluginPath, err, ErrBackend)
		}
		if !xlaCompiled || !slices.Contains(backends.List(), "xla") {
			return nil, fmt.Errorf("backend xla: not compiled into this binary (build with -tags xla): %w", ErrBackend)
		}
		prepareXLA()
		return newWithConfig("xla:" + c.PluginPath)
	}
}

// newWithConfig calls backends.NewWithConfig, which panics on unknown names.
func newWithConfig(config string) (b backends.Backend, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("start backend %q: %v: %w", config, r, ErrBackend)
		}
	}()
	b, err = backends.NewWithConfig(config)
	if err != nil {
		return nil, fmt.Errorf("start backend %q: %w: %w", config, err, ErrBackend)
	}
	return b, nil
}
