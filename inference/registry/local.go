package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/parleyhq/parley/internal/atomicfile"
	"github.com/parleyhq/parley/schema"
)

// Local is a Store on the local filesystem: <root>/<model>/<version>/ holds
// the version's files and manifest.json. Directories whose names start with
// a dot are in-progress publishes and are ignored.
type Local struct {
	root string
}

var _ Store = (*Local)(nil)

// NewLocal returns a store rooted at root, creating the directory if needed.
func NewLocal(root string) (*Local, error) {
	if root == "" {
		return nil, errors.New("new local registry: empty root")
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("new local registry %q: %w", root, err)
	}
	return &Local{root: root}, nil
}

// Root returns the directory the store lives in.
func (l *Local) Root() string { return l.root }

// Dir returns the directory of a version. It does not check that the version
// exists; loaders that read it in place must verify checksums themselves
// (inference.LoadCheckpoint does).
func (l *Local) Dir(model, version string) string {
	return filepath.Join(l.root, model, version)
}

// Models lists the models that have at least one directory, sorted.
func (l *Local) Models(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(l.root)
	if err != nil {
		return nil, fmt.Errorf("list models in %q: %w", l.root, err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && validName(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// List implements Store.
func (l *Local) List(ctx context.Context, model string) ([]schema.Manifest, error) {
	if err := checkName("model", model); err != nil {
		return nil, fmt.Errorf("list %q: %w", model, err)
	}
	ents, err := os.ReadDir(filepath.Join(l.root, model))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", model, err)
	}
	var out []schema.Manifest
	for _, e := range ents {
		if !e.IsDir() || !validName(e.Name()) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := l.Manifest(ctx, model, e.Name())
		if err != nil {
			return nil, fmt.Errorf("list %q: %w", model, err)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b schema.Manifest) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Version, b.Version)
	})
	return out, nil
}

// Manifest implements Store. It reads and validates manifest.json but does
// not hash the files (Verify and Fetch do).
func (l *Local) Manifest(ctx context.Context, model, version string) (schema.Manifest, error) {
	if err := errors.Join(checkName("model", model), checkName("version", version)); err != nil {
		return schema.Manifest{}, fmt.Errorf("manifest of %s/%s: %w", model, version, err)
	}
	m, err := readManifest(l.Dir(model, version))
	if err != nil {
		return schema.Manifest{}, fmt.Errorf("manifest of %s/%s: %w", model, version, err)
	}
	if m.Model != model || m.Version != version {
		return schema.Manifest{}, fmt.Errorf("manifest of %s/%s names %s/%s: %w", model, version, m.Model, m.Version, ErrChecksum)
	}
	return m, nil
}

// Verify hashes every file of a stored version and compares it with the
// manifest, returning an error wrapping ErrChecksum on any difference.
func (l *Local) Verify(ctx context.Context, model, version string) (schema.Manifest, error) {
	m, err := l.Manifest(ctx, model, version)
	if err != nil {
		return schema.Manifest{}, err
	}
	if err := verifyDir(ctx, l.Dir(model, version), m); err != nil {
		return schema.Manifest{}, fmt.Errorf("verify %s/%s: %w", model, version, err)
	}
	return m, nil
}

// Fetch implements Store.
func (l *Local) Fetch(ctx context.Context, model, version, dst string) (schema.Manifest, error) {
	m, err := l.Manifest(ctx, model, version)
	if err != nil {
		return schema.Manifest{}, err
	}
	if err := copyVerified(ctx, l.Dir(model, version), dst, m); err != nil {
		return schema.Manifest{}, fmt.Errorf("fetch %s/%s: %w", model, version, err)
	}
	if err := copyManifest(l.Dir(model, version), dst); err != nil {
		os.RemoveAll(dst)
		return schema.Manifest{}, fmt.Errorf("fetch %s/%s: %w", model, version, err)
	}
	return m, nil
}

// Publish implements Store. The files are copied into a hidden temporary
// directory next to the version, hashed while copying, checked against the
// manifest, fsync'd, and the directory is renamed into place. rename(2)
// refuses to replace a non-empty directory, so two concurrent publishes of
// one version cannot both succeed.
func (l *Local) Publish(ctx context.Context, model, version, srcDir string) (schema.Manifest, error) {
	fail := func(err error) (schema.Manifest, error) {
		return schema.Manifest{}, fmt.Errorf("publish %s/%s from %q: %w", model, version, srcDir, err)
	}
	m, err := readManifest(srcDir)
	if err != nil {
		return fail(err)
	}
	if m.Model != model || m.Version != version {
		return fail(fmt.Errorf("manifest is for %s/%s", m.Model, m.Version))
	}
	dst := l.Dir(model, version)
	if _, err := os.Stat(dst); err == nil {
		return fail(ErrExists)
	}
	parent := filepath.Dir(dst)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fail(err)
	}
	tmpParent, err := os.MkdirTemp(parent, "."+version+".tmp-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmpParent)
	tmp := filepath.Join(tmpParent, version)
	if err := copyVerified(ctx, srcDir, tmp, m); err != nil {
		return fail(err)
	}
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fail(err)
	}
	if err := atomicfile.Write(filepath.Join(tmp, ManifestFile), append(raw, '\n'), 0o644); err != nil {
		return fail(err)
	}
	if err := atomicfile.SyncDir(tmp); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		if _, serr := os.Stat(dst); serr == nil {
			return fail(ErrExists)
		}
		return fail(err)
	}
	if err := atomicfile.SyncDir(parent); err != nil {
		return fail(err)
	}
	return m, nil
}

// copyManifest copies manifest.json byte for byte, so that a loader of the
// fetched copy (inference.LoadCheckpoint) verifies it again.
func copyManifest(src, dst string) error {
	raw, err := os.ReadFile(filepath.Join(src, ManifestFile))
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dst, ManifestFile), raw, 0o644)
}

func readManifest(dir string) (schema.Manifest, error) {
	var m schema.Manifest
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("%s: %w", ManifestFile, ErrNotFound)
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return m, fmt.Errorf("parse %s: %w", ManifestFile, err)
	}
	if err := m.Validate(); err != nil {
		return m, err
	}
	for name := range m.Files {
		if filepath.Base(name) != name || name == "." || name == ".." {
			return m, fmt.Errorf("manifest lists %q outside the version directory", name)
		}
	}
	return m, nil
}

// listFiles returns the names of the regular files of dir other than
// manifest.json; anything else (a subdirectory, a link) is an error because
// the manifest could not vouch for it.
func listFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if e.Name() == ManifestFile {
			continue
		}
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("%q is not a regular file: %w", e.Name(), ErrChecksum)
		}
		names = append(names, e.Name())
	}
	return names, nil
}

// sameFiles checks that dir holds exactly the files m lists.
func sameFiles(dir string, m schema.Manifest) ([]string, error) {
	names, err := listFiles(dir)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, ok := m.Files[n]; !ok {
			return nil, fmt.Errorf("%s is not listed in the manifest: %w", n, ErrChecksum)
		}
	}
	for n := range m.Files {
		if !slices.Contains(names, n) {
			return nil, fmt.Errorf("%s is listed in the manifest but missing: %w", n, ErrChecksum)
		}
	}
	slices.Sort(names)
	return names, nil
}

func verifyDir(ctx context.Context, dir string, m schema.Manifest) error {
	names, err := sameFiles(dir, m)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("hash %s: %w", n, err)
		}
		if err := checkSum(n, h.Sum(nil), m); err != nil {
			return err
		}
	}
	return nil
}

// copyVerified copies the files m lists from src into the new directory dst,
// hashing as it copies. On any error dst is removed.
func copyVerified(ctx context.Context, src, dst string, m schema.Manifest) (err error) {
	names, err := sameFiles(src, m)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dst)
		}
	}()
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		sum, err := copyFile(filepath.Join(src, n), filepath.Join(dst, n))
		if err != nil {
			return err
		}
		if err := checkSum(n, sum, m); err != nil {
			return err
		}
	}
	return nil
}

func checkSum(name string, sum []byte, m schema.Manifest) error {
	if got := hex.EncodeToString(sum); got != m.Files[name] {
		return fmt.Errorf("%s: sha256 %s, manifest says %s: %w", name, got, m.Files[name], ErrChecksum)
	}
	return nil
}

// copyFile copies and fsyncs one file and returns the sha256 of what it wrote.
func copyFile(src, dst string) ([]byte, error) {
	in, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	_, cerr := io.Copy(io.MultiWriter(out, h), in)
	serr := out.Sync()
	xerr := out.Close()
	if err := errors.Join(cerr, serr, xerr); err != nil {
		return nil, fmt.Errorf("copy %q: %w", src, err)
	}
	return h.Sum(nil), nil
}
