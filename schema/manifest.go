package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"
)

// Manifest describes one immutable model version in the registry
// (<registry>/<model>/<version>/manifest.json).
type Manifest struct {
	Model           string             `json:"model"`
	Version         string             `json:"version"`
	Parent          string             `json:"parent,omitempty"`
	Algorithm       string             `json:"algorithm"`
	Hyperparameters map[string]any     `json:"hyperparameters,omitempty"`
	DataWindow      *DataWindow        `json:"data_window,omitempty"`
	Metrics         map[string]float64 `json:"metrics,omitempty"`
	// Files maps every file of the version (other than manifest.json) to its
	// hex-encoded sha256.
	Files     map[string]string `json:"files"`
	CreatedAt time.Time         `json:"created_at"`
}

// DataWindow is the span of sessions a version was trained on.
type DataWindow struct {
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	Sessions int       `json:"sessions"`
}

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Validate reports the first field of m that is missing or malformed.
func (m Manifest) Validate() error {
	if !nameRE.MatchString(m.Model) {
		return fmt.Errorf("manifest: model %q must match %s", m.Model, nameRE)
	}
	if !nameRE.MatchString(m.Version) {
		return fmt.Errorf("manifest: version %q must match %s", m.Version, nameRE)
	}
	if m.Algorithm == "" {
		return errors.New("manifest: algorithm is required")
	}
	if len(m.Files) == 0 {
		return errors.New("manifest: files is empty")
	}
	for name, sum := range m.Files {
		if name == "" || name == "manifest.json" {
			return fmt.Errorf("manifest: bad file name %q", name)
		}
		if !sha256RE.MatchString(sum) {
			return fmt.Errorf("manifest: file %q: sha256 %q is not 64 lowercase hex digits", name, sum)
		}
	}
	if m.CreatedAt.IsZero() {
		return errors.New("manifest: created_at is required")
	}
	return nil
}

// FileSHA256 is the hex-encoded sha256 of a file, as Manifest.Files
// records it.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %q: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
