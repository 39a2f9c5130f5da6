package abtest

import (
	"strings"
	"testing"
	"time"
)

func TestWriteText(t *testing.T) {
	now := t0.Add(time.Duration(len(fixtureData)) * time.Minute)
	r, err := Analyze("e1", fixtureSessions(), fixtureConfig(), now)
	if err != nil {
		t.Fatal(err)
	}
	d := Decide(r, DefaultGuardrailConfig())
	var b strings.Builder
	if err := WriteText(&b, r, &d); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// Values from TestAnalyzeMatchesReference, as %.3g.
	for _, want := range []string{
		"experiment e1 at 2026-11-30T12:33:00Z",
		"4.93 [3.72, 6.14]", "7.5 [6.53, 8.47]",
		"+2.57 [1.08, 4.06]", "0.00145", "0.027", "[0.197, 4.94]",
		"228 ms", "242 ms", "decision: hold", "not judged",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("WriteText output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("\n%s", out)
}
