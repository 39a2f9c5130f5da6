package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// NPMDir is where .ci/run installs the npm packages the tests drive (the
// OpenAI SDK, the OpenAPI linter), relative to the repository root; the
// environment variable PARLEY_NPM_DIR overrides it.
const NPMDir = "var/npm"

// NPMPackage returns the directory of the installed npm package pkg, and
// skips the test, saying how to install it, when node or the package is
// missing.
func NPMPackage(t testing.TB, pkg string) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed; .ci/run installs what this test needs")
	}
	dir := os.Getenv("PARLEY_NPM_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot(t), NPMDir)
	}
	p := filepath.Join(dir, "node_modules", pkg)
	if _, err := os.Stat(filepath.Join(p, "package.json")); err != nil {
		t.Skipf("npm package %s is not installed in %s; run the npm install lines of .ci/run", pkg, dir)
	}
	return p
}

// repoRoot is the directory of go.mod above the working directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}
