package admin_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/gateway/admin/admintest"
)

var dashboardPNG = flag.String("dashboard.png", "", "also copy the dashboard screenshot of TestDashboardInChromium to this file")

// chromium is the Debian package's browser (apt-get install -y chromium).
const chromium = "/usr/bin/chromium"

// runChromium runs headless Chromium on url with extra flags and returns
// its standard output.
func runChromium(t *testing.T, url string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--hide-scrollbars", "--user-data-dir=" + t.TempDir(),
		"--window-size=1280,1600", "--virtual-time-budget=5000",
	}
	args = append(append(args, extra...), url)
	cmd := exec.CommandContext(ctx, chromium, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(extra, " "), err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// TestDashboardInChromium loads the dashboard in headless Chromium against
// a seeded server, with the key in the URL fragment as an operator's link
// would carry it, and checks what the page's script rendered from the API;
// then it takes a screenshot.
func TestDashboardInChromium(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("%s is not installed (apt-get install -y chromium): the dashboard is not tested in a browser", chromium)
	}
	if testing.Short() {
		t.Skip("starts a browser; not in -short")
	}
	env := admintest.Start(t)
	rep, err := env.Client().Report(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	url := env.URL + "/admin/#key=" + admintest.Key

	dom := string(runChromium(t, url, "--dump-dom"))
	c := rep.Report.Canary.AvgL
	wants := []struct{ what, s string }{
		{"the canary version", `id="canary-version">` + admintest.Canary + `<`},
		{"the stable version", `id="stable-version">` + admintest.Stable + `<`},
		{"the canary's Avg.L with its CI", fmt.Sprintf(`id="avg-l-canary">%.2f [%.2f, %.2f]<`, c.Mean, c.Lo, c.Hi)},
		{"the experiment", env.ExperimentID},
		{"a fleet instance", "gw-2"},
		{"the Avg.L chart's canary line", `data-series="canary"`},
		{"the candidate's training curve", `data-series="` + admintest.Candidate + `"`},
		{"the rollout history", "ops-alice"},
		{"the update time", "updated "},
	}
	for _, w := range wants {
		if !strings.Contains(dom, w.s) {
			t.Errorf("the rendered dashboard lacks %s (%q)", w.what, w.s)
		}
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}

	shot := filepath.Join(t.TempDir(), "dashboard.png")
	runChromium(t, url, "--screenshot="+shot)
	raw, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 1600 {
		t.Errorf("screenshot is %dx%d; want 1280x1600", b.Dx(), b.Dy())
	}
	if *dashboardPNG != "" {
		if err := os.WriteFile(*dashboardPNG, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot written to %s", *dashboardPNG)
	}
}
