package abtest

import (
	"testing"
	"time"
)

func TestTimeline(t *testing.T) {
	sessions := fixtureSessions()
	now := t0.Add(time.Duration(len(fixtureData)) * time.Minute)
	pts := Timeline(sessions, 10*time.Minute, now, 100)
	// Minutes 0, 10, 20, 30 and now (33), two arms each.
	if len(pts) != 10 {
		t.Fatalf("Timeline = %d points; want 10", len(pts))
	}
	last := pts[len(pts)-2:]
	r, err := Analyze("e1", sessions, fixtureConfig(), now)
	if err != nil {
		t.Fatal(err)
	}
	if last[0].AvgL != r.Stable.AvgL || last[1].AvgL != r.Canary.AvgL || !last[0].At.Equal(now) {
		t.Errorf("last points = %+v; want the report's Avg.L at %v", last, now)
	}
	if pts[0].AvgL.N != 1 || pts[1].AvgL.N != 0 {
		t.Errorf("first points N = %d, %d; want 1 stable, 0 canary", pts[0].AvgL.N, pts[1].AvgL.N)
	}
	if got := Timeline(sessions, time.Second, now, 50); len(got) > 2*50 {
		t.Errorf("Timeline with maxPoints 50 = %d points; want at most 100", len(got))
	}
}
