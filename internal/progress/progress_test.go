package progress

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clock is a fake time that a test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func lines(b *bytes.Buffer) []string {
	s := strings.TrimSuffix(b.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestReporterLinesOffTerminal(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	var out bytes.Buffer
	r := newReporter(&out, "sft npc", "step", 100, c.now)
	r.interval = 5 * time.Second

	// 10 steps a second: a line every 5 s, never one per step.
	for range 60 {
		c.t = c.t.Add(100 * time.Millisecond)
		r.Add(1)
	}
	r.Describe("sft npc loss 1.250")
	for range 40 {
		c.t = c.t.Add(100 * time.Millisecond)
		r.Add(1)
	}
	r.Finish()

	want := []string{
		"sft npc: 50/100 steps (50%), 10.0 steps/s, elapsed 5s, eta 5s",
		"sft npc loss 1.250: 100/100 steps (100%), 10.0 steps/s, elapsed 10s",
		"sft npc loss 1.250: 100/100 steps (100%), 10.0 steps/s, took 10s",
	}
	got := lines(&out)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("output:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(out.String(), "\r") {
		t.Errorf("output has a carriage return: %q", out.String())
	}
}

func TestReporterSlowUnitsAndResume(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	var out bytes.Buffer
	r := newReporter(&out, "experiment", "row", 6, c.now)
	r.Resume(2) // kept from an earlier run: not in the rate
	c.t = c.t.Add(4 * time.Minute)
	r.Add(1)
	c.t = c.t.Add(2 * time.Minute)
	r.Add(1)
	r.Finish()
	want := []string{
		"experiment: 3/6 rows (50%), 4m0s/row, elapsed 4m0s, eta 12m0s",
		"experiment: 4/6 rows (66%), 3m0s/row, elapsed 6m0s, eta 6m0s",
		"experiment: 4/6 rows (66%), 3m0s/row, took 6m0s",
	}
	if got := lines(&out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("output:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestReporterNothingDone(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	var out bytes.Buffer
	r := newReporter(&out, "sft user", "step", 10, c.now)
	r.Resume(10)
	c.t = c.t.Add(1500 * time.Millisecond)
	r.Finish()
	if got, want := out.String(), "sft user: 10/10 steps (100%), took 2s\n"; got != want {
		t.Errorf("output %q; want %q", got, want)
	}
}

func TestReporterNilWriter(t *testing.T) {
	r := New(nil, "sft npc", "step", 3)
	r.Resume(1)
	r.Describe("sft npc loss 1")
	r.Add(2)
	r.Finish() // must not panic
}

func TestReporterFileIsNotATerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if r := New(f, "sft npc", "step", 3); r.bar != nil {
		t.Error("a Reporter on a regular file draws a bar; want plain lines")
	}
}
