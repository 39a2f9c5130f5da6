package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/parleyhq/parley/inference/registry"
)

// CurvesFile is the name of a version's training curves in its registry
// directory. Like every file of a version it is listed, with its sha256, in
// the manifest.
const CurvesFile = "curves.json"

// Curves are the training curves of one model version, as the trainer
// recorded them: one series per measured quantity over a common x axis.
type Curves struct {
	Model   string `json:"model"`
	Version string `json:"version"`
	// X names the x axis, such as "step".
	X      string   `json:"x"`
	Series []Series `json:"series"`
}

// Series is one curve, such as "loss" or "avg_l", in the order of X.
type Series struct {
	Name   string       `json:"name"`
	Points []CurvePoint `json:"points"`
}

// CurvePoint is one point of a Series.
type CurvePoint struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

// CurveSource gives the training curves of a version, or an error wrapping
// registry.ErrNotFound when it has none.
type CurveSource interface {
	Curves(ctx context.Context, model, version string) (Curves, error)
}

// LocalCurves reads curves.json from the versions of a local registry,
// checking it against the sha256 in the version's manifest.
type LocalCurves struct {
	Registry *registry.Local
}

var _ CurveSource = LocalCurves{}

// Curves implements CurveSource.
func (l LocalCurves) Curves(ctx context.Context, model, version string) (Curves, error) {
	fail := func(err error) (Curves, error) {
		return Curves{}, fmt.Errorf("curves of %s/%s: %w", model, version, err)
	}
	m, err := l.Registry.Manifest(ctx, model, version)
	if err != nil {
		return fail(err)
	}
	want, ok := m.Files[CurvesFile]
	if !ok {
		return fail(fmt.Errorf("the version has no %s: %w", CurvesFile, registry.ErrNotFound))
	}
	raw, err := os.ReadFile(filepath.Join(l.Registry.Dir(model, version), CurvesFile))
	if errors.Is(err, fs.ErrNotExist) {
		return fail(fmt.Errorf("%s is listed but missing: %w", CurvesFile, registry.ErrChecksum))
	}
	if err != nil {
		return fail(err)
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != want {
		return fail(fmt.Errorf("%s: %w", CurvesFile, registry.ErrChecksum))
	}
	var cv Curves
	if err := json.Unmarshal(raw, &cv); err != nil {
		return fail(fmt.Errorf("decode %s: %w", CurvesFile, err))
	}
	cv.Model, cv.Version = model, version
	return cv, nil
}
