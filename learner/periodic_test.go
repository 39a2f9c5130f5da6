package learner

import (
	"testing"
	"time"
)

func TestScheduleDue(t *testing.T) {
	cases := []struct {
		name  string
		s     schedule
		n     int
		since time.Duration
		want  bool
	}{
		{"enough sessions", schedule{everySessions: 10}, 10, 0, true},
		{"too few sessions", schedule{everySessions: 10}, 9, time.Hour, false},
		{"time passed with the minimum", schedule{every: time.Hour, minSessions: 5}, 5, time.Hour, true},
		{"time passed below the minimum", schedule{every: time.Hour, minSessions: 5}, 4, 2 * time.Hour, false},
		{"time passed with nothing new", schedule{every: time.Hour}, 0, 2 * time.Hour, false},
		{"too early", schedule{every: time.Hour}, 100, time.Minute, false},
	}
	for _, c := range cases {
		if got := c.s.due(c.n, c.since); got != c.want {
			t.Errorf("%s: due(%d, %v) = %v; want %v", c.name, c.n, c.since, got, c.want)
		}
	}
}
