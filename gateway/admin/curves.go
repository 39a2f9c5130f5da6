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
	"github.com/parleyhq/parley/schema"
)

// CurveSource gives the training curves of a version, or an error wrapping
// registry.ErrNotFound when it has none.
type CurveSource interface {
	Curves(ctx context.Context, model, version string) (schema.Curves, error)
}

// LocalCurves reads curves.json from the versions of a local registry,
// checking it against the sha256 in the version's manifest.
type LocalCurves struct {
	Registry *registry.Local
}

var _ CurveSource = LocalCurves{}

// Curves implements CurveSource.
func (l LocalCurves) Curves(ctx context.Context, model, version string) (schema.Curves, error) {
	fail := func(err error) (schema.Curves, error) {
		return schema.Curves{}, fmt.Errorf("curves of %s/%s: %w", model, version, err)
	}
	m, err := l.Registry.Manifest(ctx, model, version)
	if err != nil {
		return fail(err)
	}
	want, ok := m.Files[schema.CurvesFile]
	if !ok {
		return fail(fmt.Errorf("the version has no %s: %w", schema.CurvesFile, registry.ErrNotFound))
	}
	raw, err := os.ReadFile(filepath.Join(l.Registry.Dir(model, version), schema.CurvesFile))
	if errors.Is(err, fs.ErrNotExist) {
		return fail(fmt.Errorf("%s is listed but missing: %w", schema.CurvesFile, registry.ErrChecksum))
	}
	if err != nil {
		return fail(err)
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != want {
		return fail(fmt.Errorf("%s: %w", schema.CurvesFile, registry.ErrChecksum))
	}
	var cv schema.Curves
	if err := json.Unmarshal(raw, &cv); err != nil {
		return fail(fmt.Errorf("decode %s: %w", schema.CurvesFile, err))
	}
	cv.Model, cv.Version = model, version
	return cv, nil
}
