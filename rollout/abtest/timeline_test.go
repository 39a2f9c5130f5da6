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

// TestTimelineOverCenturies: a session that ended 2,000 years before now
// (an event's timestamp is outside input) gives at most maxPoints times
// ending at now. The widened step overflowed and went backwards, and the
// timeline grew until the process ran out of memory (FuzzCollect).
func TestTimelineOverCenturies(t *testing.T) {
	sessions := fixtureSessions()
	sessions[0].Ended = sessions[0].Ended.AddDate(-2000, 0, 0)
	now := t0.Add(time.Hour)
	for _, maxPoints := range []int{2, 3, 120} {
		pts := Timeline(sessions, time.Minute, now, maxPoints)
		if len(pts) == 0 || len(pts) > 2*maxPoints || !pts[len(pts)-1].At.Equal(now) {
			t.Errorf("maxPoints %d: %d points, the last at %v; want 2 to %d, the last at %v", maxPoints, len(pts), pts[len(pts)-1].At, 2*maxPoints, now)
		}
		for i := 2; i < len(pts); i += 2 {
			if !pts[i].At.After(pts[i-2].At) {
				t.Fatalf("maxPoints %d: point %d at %v, not after %v", maxPoints, i/2, pts[i].At, pts[i-2].At)
			}
		}
	}
}
