package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/parleyhq/parley/internal/atomicfile"
	"github.com/parleyhq/parley/schema"
)

// Import publishes the named files of srcDir, a directory that is not laid
// out as a version (e.g. a Hugging Face checkpoint with other files
// beside), as version of model. It records the sha256 of each file in
// man.Files (Model, Version and, when zero, CreatedAt are filled in),
// stages the files with the manifest in a hidden directory under the
// store's root (hard links where the filesystem allows, else copies) and
// publishes that; srcDir is left untouched.
func (l *Local) Import(ctx context.Context, model, version, srcDir string, files []string, man schema.Manifest) (schema.Manifest, error) {
	fail := func(err error) (schema.Manifest, error) {
		return schema.Manifest{}, fmt.Errorf("import %s/%s from %q: %w", model, version, srcDir, err)
	}
	if len(files) == 0 {
		return fail(errors.New("no files to import"))
	}
	man.Model, man.Version, man.Files = model, version, map[string]string{}
	if man.CreatedAt.IsZero() {
		man.CreatedAt = time.Now().UTC()
	}
	stage, err := os.MkdirTemp(l.root, ".import-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(stage)
	for _, name := range files {
		if filepath.Base(name) != name || name == ManifestFile {
			return fail(fmt.Errorf("file %q: want a plain file name other than %s", name, ManifestFile))
		}
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		src, dst := filepath.Join(srcDir, name), filepath.Join(stage, name)
		if err := os.Link(src, dst); err != nil {
			if _, err := copyFile(src, dst); err != nil {
				return fail(err)
			}
		}
		sum, err := schema.FileSHA256(dst)
		if err != nil {
			return fail(err)
		}
		man.Files[name] = sum
	}
	if err := man.Validate(); err != nil {
		return fail(err)
	}
	raw, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return fail(err)
	}
	if err := atomicfile.Write(filepath.Join(stage, ManifestFile), append(raw, '\n'), 0o644); err != nil {
		return fail(err)
	}
	return l.Publish(ctx, model, version, stage)
}

// NextVersion returns "v<N+1>" for the highest "v<N>" of model in s ("v1"
// for a model without versions).
func NextVersion(ctx context.Context, s Store, model string) (string, error) {
	mans, err := s.List(ctx, model)
	if err != nil {
		return "", fmt.Errorf("list versions of %s: %w", model, err)
	}
	top := 0
	for _, m := range mans {
		if n, err := strconv.Atoi(strings.TrimPrefix(m.Version, "v")); err == nil && strings.HasPrefix(m.Version, "v") {
			top = max(top, n)
		}
	}
	return fmt.Sprintf("v%d", top+1), nil
}
