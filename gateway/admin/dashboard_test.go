package admin_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/parleyhq/parley/gateway/admin/admintest"
)

var dashboardPNG = flag.String("dashboard.png", "", "also copy the dashboard screenshot of TestDashboardInChromium to this file")

// chromium is the Debian package's browser (apt-get install -y chromium).
const chromium = "/usr/bin/chromium"

// chromiumCmd is Chromium with args in a process group of its own, with a
// fresh profile and HOME. Chromium's helper processes outlive a killed
// browser and go on writing its profile, so cancelling ctx kills the whole
// group, and so does the test's cleanup, before the profile is removed.
func chromiumCmd(ctx context.Context, t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	profile, home := tempDir(t), tempDir(t)
	cmd := exec.CommandContext(ctx, chromium, append([]string{"--user-data-dir=" + profile}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	return cmd
}

// tempDir is a directory removed after the test, retried for a few seconds
// while killed processes finish writing into it.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "parley-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for range 50 {
			if err := os.RemoveAll(dir); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("could not remove %s", dir)
	})
	return dir
}

// runChromium runs headless Chromium on url with extra flags and returns
// its standard output.
func runChromium(t *testing.T, url string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--hide-scrollbars",
		"--window-size=1280,1600", "--virtual-time-budget=5000",
	}
	args = append(append(args, extra...), url)
	cmd := chromiumCmd(ctx, t, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
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

// browser is headless Chromium driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: JSON messages ending in NUL on fds 3 and 4),
// attached to one page.
type browser struct {
	t       *testing.T
	in      *os.File // our end of the browser's fd 3
	mu      sync.Mutex
	nextID  int
	waiting map[int]chan cdpReply
	session string
}

type cdpReply struct {
	ID     int             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// startBrowser starts Chromium and opens url in a page of its own.
func startBrowser(t *testing.T, url string) *browser {
	t.Helper()
	toBrowser, browserIn, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	browserOut, fromBrowser, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := chromiumCmd(ctx, t, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{toBrowser, fromBrowser} // fds 3 and 4
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	toBrowser.Close()
	fromBrowser.Close()
	b := &browser{t: t, in: browserIn, waiting: map[int]chan cdpReply{}}
	go func() {
		r := bufio.NewReader(browserOut)
		for {
			msg, err := r.ReadBytes(0)
			if err != nil {
				return
			}
			var rep cdpReply
			if json.Unmarshal(msg[:len(msg)-1], &rep) != nil || rep.ID == 0 {
				continue // an event
			}
			b.mu.Lock()
			ch := b.waiting[rep.ID]
			delete(b.waiting, rep.ID)
			b.mu.Unlock()
			if ch != nil {
				ch <- rep
			}
		}
	}()
	t.Cleanup(func() {
		browserIn.Close()
		cancel()
		_ = cmd.Wait()
		browserOut.Close()
	})
	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call("Target.createTarget", map[string]any{"url": url}, &target)
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	b.call("Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached)
	b.session = attached.SessionID
	return b
}

// call sends one command (to the page once attached) and decodes its result.
func (b *browser) call(method string, params any, out any) {
	b.t.Helper()
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpReply, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method, "params": params}
	if b.session != "" {
		msg["sessionId"] = b.session
	}
	raw, _ := json.Marshal(msg)
	if _, err := b.in.Write(append(raw, 0)); err != nil {
		b.t.Fatalf("cdp %s: %v", method, err)
	}
	select {
	case rep := <-ch:
		if rep.Error != nil {
			b.t.Fatalf("cdp %s: %s", method, rep.Error.Message)
		}
		if out != nil {
			if err := json.Unmarshal(rep.Result, out); err != nil {
				b.t.Fatalf("cdp %s result %s: %v", method, rep.Result, err)
			}
		}
	case <-time.After(30 * time.Second):
		b.t.Fatalf("cdp %s: no reply in 30s", method)
	}
}

// eval evaluates a JavaScript expression in the page and returns its value
// as a string.
func (b *browser) eval(expr string) string {
	b.t.Helper()
	var res struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	b.call("Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true}, &res)
	if res.ExceptionDetails != nil {
		b.t.Fatalf("eval %s: %s", expr, res.ExceptionDetails.Text)
	}
	if res.Result.Value == nil {
		return ""
	}
	return fmt.Sprint(res.Result.Value)
}

// text is the text of the element with id, "" when there is none.
func (b *browser) text(id string) string {
	return b.eval(fmt.Sprintf(`(document.getElementById(%q) || {}).textContent || ""`, id))
}

// waitText waits until the element with id shows want.
func (b *browser) waitText(id, want string) {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := b.text(id)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("#%s shows %q after 20s; want %q (status %q)", id, got, want, b.text("status"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDashboardDrivesACanary drives the dashboard in headless Chromium as an
// operator would: it starts a stepped canary from the form, advances it,
// pauses and resumes it, ramps it, promotes it, then starts another and
// aborts it; each change is a compare-and-set recorded for the operator.
func TestDashboardDrivesACanary(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("%s is not installed (apt-get install -y chromium): the dashboard is not tested in a browser", chromium)
	}
	if testing.Short() {
		t.Skip("starts a browser; not in -short")
	}
	env := admintest.Start(t)
	b := startBrowser(t, env.URL+"/admin/#key="+admintest.Key)
	b.waitText("canary-version", admintest.Canary)
	// The published analysis: auto-promotion as the learner runs it, and
	// only the always-valid test as the verdict.
	b.waitText("auto-promote", "off")
	if r := b.text("report"); strings.Contains(r, "Welch") || !strings.Contains(r, "mSPRT p (always valid)") {
		t.Errorf("the report shows %q; want the always-valid test and no Welch p", r)
	}
	b.eval("window.confirm = () => true")
	click := func(action string) {
		b.eval(fmt.Sprintf(`document.querySelector('#actions button[data-action=%q]').click()`, action))
	}
	submit := func(version, weight, steps, players string) {
		b.eval(fmt.Sprintf(`(() => {
			const set = (id, v) => { document.getElementById(id).value = v; };
			set("canary-version-input", %q); set("canary-weight", %q); set("canary-steps", %q); set("canary-min-players", %q);
			document.getElementById("canaryform").requestSubmit();
		})()`, version, weight, steps, players))
	}

	submit(admintest.Candidate, "", "5,20,50", "10")
	b.waitText("canary-version", admintest.Candidate)
	b.waitText("canary-steps-value", "[5] → 20 → 50 %, 10 players per arm per step")
	click("advance")
	b.waitText("canary-weight-value", "20 %")
	click("pause")
	b.waitText("rollout-state", "paused")
	click("resume")
	b.waitText("rollout-state", "canary")
	submit(admintest.Candidate, "50", "", "")
	b.waitText("canary-weight-value", "50 %")
	click("promote")
	b.waitText("stable-version", admintest.Candidate)
	submit(admintest.Canary, "10", "", "")
	b.waitText("canary-version", admintest.Canary)
	click("rollback")
	b.waitText("rollout-state", "rolling_back")

	st, err := env.Client().Rollout(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range st.History {
		if h.By != admintest.Operator && h.Action != "init" {
			t.Errorf("change %s by %s; want %s", h.Action, h.By, admintest.Operator)
		}
		got = append(got, h.Action)
	}
	want := "canary canary advance pause resume canary promote canary rollback"
	if strings.Join(got[1:], " ") != want {
		t.Errorf("history %v; want init then %s", got, want)
	}
}
