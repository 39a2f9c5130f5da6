package abtest

import (
	"slices"
	"time"

	"github.com/parleyhq/parley/schema"
)

// Point is one arm's Avg.L over the sessions that had ended by At, with its
// player-level 95 % CI: a point of the dashboard's "Avg.L over time" chart.
type Point struct {
	At   time.Time `json:"at"`
	Arm  string    `json:"arm"`
	AvgL Estimate  `json:"avg_l"`
}

// Timeline returns, for each arm, the cumulative Avg.L every step from the
// first ended session until now, estimated like the report's (per-player
// totals, delta-method CI). When that would give more than maxPoints (at
// least 2) times per arm, step is widened to fit.
func Timeline(sessions []Session, step time.Duration, now time.Time, maxPoints int) []Point {
	var ended []Session
	for _, s := range sessions {
		if s.Done() && !s.Ended.After(now) && (s.Arm == schema.ArmStable || s.Arm == schema.ArmCanary) {
			ended = append(ended, s)
		}
	}
	if len(ended) == 0 || step <= 0 || maxPoints < 2 {
		return nil
	}
	slices.SortStableFunc(ended, func(a, b Session) int { return a.Ended.Compare(b.Ended) })
	first := ended[0].Ended
	// now.Sub saturates past 292 years, so the last time is also forced
	// to now after maxPoints of them.
	if span := now.Sub(first); span/step+1 > time.Duration(maxPoints) {
		step = span/time.Duration(maxPoints-1) + 1 // rounded up, without overflowing
	}
	type key struct{ player, arm string }
	players := map[key]*[2]float64{} // ended sessions, turns
	var t Tally
	var out []Point
	i := 0
	for at, n := first, 1; ; at, n = at.Add(step), n+1 {
		if at.After(now) || n == maxPoints {
			at = now
		}
		for ; i < len(ended) && !ended[i].Ended.After(at); i++ {
			s := ended[i]
			k := key{s.PlayerID, s.Arm}
			p := players[k]
			if p == nil {
				p = new([2]float64)
				players[k] = p
			}
			r := &t.Arm(s.Arm).Turns
			r.Remove(p[0], p[1], 0)
			p[0]++
			p[1] += float64(s.Turns)
			r.Add(p[0], p[1], 0)
		}
		out = append(out,
			Point{At: at, Arm: schema.ArmStable, AvgL: estimate(t.Stable.Turns)},
			Point{At: at, Arm: schema.ArmCanary, AvgL: estimate(t.Canary.Turns)})
		if !at.Before(now) {
			return out
		}
	}
}
