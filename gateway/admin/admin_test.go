package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/parleyhq/parley/gateway/admin"
	"github.com/parleyhq/parley/gateway/admin/admintest"
	"github.com/parleyhq/parley/rollout/abtest"
	"github.com/parleyhq/parley/schema"
)

func TestReadEndpoints(t *testing.T) {
	ctx := context.Background()
	env := admintest.Start(t)
	cl := env.Client()

	st, err := cl.Rollout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State.State != schema.PhaseCanary || st.State.Canary != admintest.Canary || st.State.CanaryWeight != admintest.CanaryWeight {
		t.Errorf("rollout state = %+v; want canary %s at %d%%", st.State, admintest.Canary, admintest.CanaryWeight)
	}
	if len(st.Fleet) != 2 || st.Fleet[0].Instance != "gw-1" || strings.Join(st.Fleet[1].Loaded, ",") != "v1,v2" {
		t.Errorf("fleet = %+v; want gw-1 and gw-2 with v1,v2 loaded", st.Fleet)
	}
	if len(st.History) != 2 || st.History[1].Action != "canary" || st.History[1].By != admintest.Operator {
		t.Errorf("history = %+v; want init then canary by %s", st.History, admintest.Operator)
	}

	models, err := cl.Models(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range models.Versions {
		got = append(got, v.Version+":"+v.Serving)
	}
	if want := "v1:stable v2:canary v3:"; strings.Join(got, " ") != want {
		t.Errorf("models = %q; want %q", strings.Join(got, " "), want)
	}

	m, err := cl.Manifest(ctx, admintest.Canary)
	if err != nil || m.Parent != admintest.Stable || m.Metrics["avg_l"] != 6.8 {
		t.Errorf("Manifest(v2) = %+v, %v; want parent v1 and avg_l 6.8", m, err)
	}

	diff, err := cl.Diff(ctx, admintest.Stable, admintest.Canary)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diff.Metrics {
		if d.Name == "avg_l" && (d.Delta == nil || math.Abs(*d.Delta-0.9) > 1e-9) {
			t.Errorf("diff avg_l delta = %v; want 0.9", d.Delta)
		}
	}
	if len(diff.Metrics) != 4 {
		t.Errorf("diff has %d metrics; want 4", len(diff.Metrics))
	}

	cv, err := cl.Curves(ctx, admintest.Canary)
	if err != nil || cv.Version != admintest.Canary || len(cv.Series) != 2 || len(cv.Series[1].Points) != 21 {
		t.Errorf("Curves(v2) = %+v, %v; want 2 series of 21 points", cv, err)
	}

	rep, err := cl.Report(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	// The report is abtest.Analyze over the same sessions.
	want, err := abtest.Analyze(env.ExperimentID, env.Sessions.Sessions(env.ExperimentID), abtest.DefaultConfig(), rep.Report.At)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Report.ExperimentID != env.ExperimentID || rep.Report.Stable.AvgL != want.Stable.AvgL || rep.Report.Canary.AvgL != want.Canary.AvgL {
		t.Errorf("report Avg.L = %+v / %+v; want %+v / %+v", rep.Report.Stable.AvgL, rep.Report.Canary.AvgL, want.Stable.AvgL, want.Canary.AvgL)
	}
	if rep.Report.Stable.AvgL.N != 160 || rep.Report.Canary.AvgL.N != 40 {
		t.Errorf("report sessions = %d stable, %d canary; want 160, 40", rep.Report.Stable.AvgL.N, rep.Report.Canary.AvgL.N)
	}
	if rep.Decision.Verdict == "" || len(rep.Decision.Checks) != 4 {
		t.Errorf("decision = %+v; want a verdict and 4 checks", rep.Decision)
	}

	tl, err := cl.Timeline(ctx, env.ExperimentID)
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Points) < 4 {
		t.Fatalf("timeline has %d points; want several", len(tl.Points))
	}
	last := tl.Points[len(tl.Points)-1]
	if last.Arm != schema.ArmCanary || last.AvgL.N != 40 || math.Abs(last.AvgL.Mean-want.Canary.AvgL.Mean) > 1e-9 {
		t.Errorf("last timeline point = %+v; want the canary's final Avg.L %v over 40 sessions", last, want.Canary.AvgL.Mean)
	}
}

// TestErrors checks each bad request's status and JSON error body.
func TestErrors(t *testing.T) {
	env := admintest.Start(t)
	cases := []struct {
		name, method, path, key, body string
		status                        int
		code                          string
	}{
		{"no key", "GET", "/rollout", "", "", 401, "unauthorized"},
		{"wrong key", "GET", "/rollout", "nope", "", 401, "unauthorized"},
		{"unknown version", "GET", "/models/v9", admintest.Key, "", 404, "not_found"},
		{"bad version name", "GET", "/models/..%2Fx", admintest.Key, "", 404, "not_found"},
		{"no curves", "GET", "/models/v1/curves", admintest.Key, "", 404, "not_found"},
		{"diff without b", "GET", "/models/diff?a=v1", admintest.Key, "", 400, "bad_request"},
		{"unknown deployment", "GET", "/rollout?deployment=elsewhere", admintest.Key, "", 404, "not_found"},
		{"canary without body", "POST", "/rollout/canary", admintest.Key, "", 400, "bad_request"},
		{"canary weight 0", "POST", "/rollout/canary", admintest.Key, `{"version":"v3","weight":0}`, 400, "bad_request"},
		{"canary unknown field", "POST", "/rollout/canary", admintest.Key, `{"version":"v3","weight":5,"x":1}`, 400, "bad_request"},
		{"canary of stable", "POST", "/rollout/canary", admintest.Key, `{"version":"v1","weight":5}`, 409, "conflict"},
		{"stale generation", "POST", "/rollout/pause", admintest.Key, `{"generation":1}`, 409, "conflict"},
		{"resume while canary", "POST", "/rollout/resume", admintest.Key, "", 409, "conflict"},
		{"not json", "POST", "/rollout/pause", admintest.Key, `{generation`, 400, "bad_request"},
		{"advance without steps", "POST", "/rollout/advance", admintest.Key, "", 409, "conflict"},
		{"canary steps falling", "POST", "/rollout/canary", admintest.Key, `{"version":"v3","steps":[20,5]}`, 400, "bad_request"},
		{"no experiment", "GET", "/report?deployment=elsewhere", admintest.Key, "", 404, "not_found"},
		{"report of another experiment", "GET", "/report?experiment=old", admintest.Key, "", 404, "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(c.method, env.APIURL()+c.path, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			if c.key != "" {
				req.Header.Set("Authorization", "Bearer "+c.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			var eb schema.ErrorBody
			if err := json.Unmarshal(raw, &eb); err != nil || eb.Validate() != nil {
				t.Errorf("%s %s body = %s; want {error:{code,message}}", c.method, c.path, raw)
			}
			if resp.StatusCode != c.status || eb.Error.Code != c.code {
				t.Errorf("%s %s = %d %s (%s); want %d %s", c.method, c.path, resp.StatusCode, eb.Error.Code, eb.Error.Message, c.status, c.code)
			}
		})
	}
	// None of the refused changes moved the rollout.
	st, err := env.Client().Rollout(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.State.Generation != 2 || st.State.State != schema.PhaseCanary {
		t.Errorf("after refused changes the rollout is %s at generation %d; want canary at 2", st.State.State, st.State.Generation)
	}
}

// TestChanges walks a canary through ramp, pause, resume and promote, each
// recorded with the caller, then advances a new stepped canary and rolls it
// back.
func TestChanges(t *testing.T) {
	ctx := context.Background()
	env := admintest.Start(t)
	cl := env.Client()
	gen := func(n int64) *int64 { return &n }
	steps := []struct {
		name  string
		do    func() (schema.RolloutChange, error)
		state schema.RolloutPhase
		check func(schema.RolloutState) bool
	}{
		{"ramp", func() (schema.RolloutChange, error) {
			return cl.Canary(ctx, schema.CanaryRequest{Version: admintest.Canary, Weight: 50, Generation: gen(2)})
		},
			schema.PhaseCanary, func(s schema.RolloutState) bool { return s.CanaryWeight == 50 && s.ExperimentID == env.ExperimentID }},
		{"pause", func() (schema.RolloutChange, error) { return cl.Pause(ctx, admin.ChangeRequest{}) },
			schema.PhasePaused, func(s schema.RolloutState) bool { return s.CanaryWeight == 50 }},
		{"resume", func() (schema.RolloutChange, error) { return cl.Resume(ctx, admin.ChangeRequest{Generation: gen(4)}) },
			schema.PhaseCanary, func(s schema.RolloutState) bool { return true }},
		{"promote", func() (schema.RolloutChange, error) { return cl.Promote(ctx, admin.ChangeRequest{Reason: "Avg.L up"}) },
			schema.PhaseSteady, func(s schema.RolloutState) bool { return s.Stable == admintest.Canary && s.Canary == "" }},
		{"new canary", func() (schema.RolloutChange, error) {
			return cl.Canary(ctx, schema.CanaryRequest{Version: admintest.Candidate, Steps: []int{10, 30}, MinStepPlayers: 50})
		},
			schema.PhaseCanary, func(s schema.RolloutState) bool {
				return s.Canary == admintest.Candidate && s.ExperimentID != env.ExperimentID && s.CanaryWeight == 10 && s.MinStepPlayers == 50
			}},
		{"advance", func() (schema.RolloutChange, error) { return cl.Advance(ctx, admin.ChangeRequest{Generation: gen(7)}) },
			schema.PhaseCanary, func(s schema.RolloutState) bool { return s.CanaryWeight == 30 && s.Step == 1 }},
		{"rollback", func() (schema.RolloutChange, error) { return cl.Rollback(ctx, admin.ChangeRequest{Reason: "latency"}) },
			schema.PhaseRollingBack, func(s schema.RolloutState) bool { return s.CanaryWeight == 0 && s.Stable == admintest.Canary }},
	}
	for i, s := range steps {
		ch, err := s.do()
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if ch.To.State != s.state || !s.check(ch.To) || ch.By != admintest.Operator || ch.To.Generation != int64(i+3) {
			t.Errorf("%s = %+v by %s; want state %s at generation %d by %s", s.name, ch.To, ch.By, s.state, i+3, admintest.Operator)
		}
	}
	st, err := cl.Rollout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(st.History); n != 9 || st.History[n-1].Reason != "latency" {
		t.Errorf("history has %d changes, last %+v; want 9 ending with the rollback for latency", n, st.History[n-1])
	}
}

// TestConcurrentPromotes: operators who both read generation 2 race; one
// promote wins and the other gets 409.
func TestConcurrentPromotes(t *testing.T) {
	env := admintest.Start(t)
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			g := int64(2)
			_, errs[i] = env.Client().Promote(context.Background(), admin.ChangeRequest{Generation: &g})
		})
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		var ae *admin.APIError
		switch {
		case err == nil:
			wins++
		case errors.As(err, &ae) && ae.Status == http.StatusConflict:
		default:
			t.Errorf("promote: %v; want success or 409", err)
		}
	}
	if wins != 1 {
		t.Errorf("%d of %d concurrent promotes won; want exactly 1", wins, n)
	}
}

func TestDashboardHandler(t *testing.T) {
	env := admintest.Start(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	cases := []struct {
		path     string
		status   int
		ctype    string
		contains string
	}{
		{"/admin/", 200, "text/html", `<meta name="parley-api" content="/admin/v1">`},
		{"/admin/app.js", 200, "text/javascript", "function chart("},
		{"/admin/style.css", 200, "text/css", "--canary"},
		{"/admin", 301, "", ""},
	}
	for _, c := range cases {
		resp, err := noRedirect.Get(env.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), c.ctype) || !strings.Contains(string(raw), c.contains) {
			t.Errorf("GET %s = %d %s; want %d %s containing %q", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), c.status, c.ctype, c.contains)
		}
		if c.status == 301 {
			if loc := resp.Header.Get("Location"); loc != "/admin/" {
				t.Errorf("GET %s redirects to %q; want /admin/", c.path, loc)
			}
		} else if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("GET %s has no restrictive Content-Security-Policy", c.path)
		}
	}
}
