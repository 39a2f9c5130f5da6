// Package registry stores versioned, immutable model versions with their
// manifests (DESIGN.md §3, "Model registry"). A version is a directory of
// files plus manifest.json, which records the sha256 of every other file;
// Store is the small interface the gateway and the learner use, and Local is
// its filesystem implementation (<root>/<model>/<version>/).
package registry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/parleyhq/parley/schema"
)

// ManifestFile is the name of a version's manifest inside its directory.
const ManifestFile = "manifest.json"

// Errors callers branch on.
var (
	// ErrNotFound is returned for a model or version the store does not hold.
	ErrNotFound = errors.New("registry: version not found")
	// ErrExists is returned by Publish for a version that is already stored:
	// versions are immutable.
	ErrExists = errors.New("registry: version already exists")
	// ErrChecksum is returned when a file does not match the sha256 in its
	// manifest, or the files of a version are not exactly those it lists.
	ErrChecksum = errors.New("registry: checksum mismatch")
)

// Store holds model versions. It is small on purpose so that an object store
// can implement it too: every method maps to a prefix listing, a get or a
// conditional put.
type Store interface {
	// List returns the manifests of every version of model, oldest first
	// (by CreatedAt, then version). An unknown model has no versions.
	List(ctx context.Context, model string) ([]schema.Manifest, error)
	// Manifest returns the manifest of one version, or ErrNotFound.
	Manifest(ctx context.Context, model, version string) (schema.Manifest, error)
	// Fetch copies a version, manifest.json included, into dst (which must
	// not exist), verifying the
	// sha256 of every file; on a mismatch it removes dst and returns an
	// error wrapping ErrChecksum.
	Fetch(ctx context.Context, model, version, dst string) (schema.Manifest, error)
	// Publish stores the version in srcDir (its files plus manifest.json,
	// whose Model and Version must be model and version). Every file is
	// verified against the manifest; the version appears atomically and is
	// never overwritten (ErrExists).
	Publish(ctx context.Context, model, version, srcDir string) (schema.Manifest, error)
}

// MetricDiff compares one metric between two versions. A field is nil where
// it is undefined: A or B when that version lacks the metric, Delta unless
// both have it, Rel also when A is 0.
type MetricDiff struct {
	Name  string   `json:"name"`
	A     *float64 `json:"a,omitempty"`
	B     *float64 `json:"b,omitempty"`
	Delta *float64 `json:"delta,omitempty"` // B − A
	Rel   *float64 `json:"rel,omitempty"`   // (B − A) / |A|
}

// DiffMetrics compares the metrics of versions a and b, one row per metric
// that either has, sorted by name.
func DiffMetrics(a, b schema.Manifest) []MetricDiff {
	names := make([]string, 0, len(a.Metrics)+len(b.Metrics))
	for n := range a.Metrics {
		names = append(names, n)
	}
	for n := range b.Metrics {
		if _, ok := a.Metrics[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	out := make([]MetricDiff, 0, len(names))
	for _, n := range names {
		d := MetricDiff{Name: n}
		if v, ok := a.Metrics[n]; ok {
			d.A = &v
		}
		if v, ok := b.Metrics[n]; ok {
			d.B = &v
		}
		if d.A != nil && d.B != nil {
			delta := *d.B - *d.A
			d.Delta = &delta
			if *d.A != 0 {
				rel := delta / math.Abs(*d.A)
				d.Rel = &rel
			}
		}
		out = append(out, d)
	}
	return out
}

// checkName rejects names that schema.Manifest would not accept, so that a
// name is always safe as a path element; such a version cannot exist.
func checkName(kind, s string) error {
	if !validName(s) {
		return fmt.Errorf("%s %q is not a valid name: %w", kind, s, ErrNotFound)
	}
	return nil
}

// validName is schema.Manifest's rule for model and version names:
// ^[a-z0-9][a-z0-9._-]{0,63}$.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i, c := range s {
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}
