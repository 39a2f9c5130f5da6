// Package admintest serves the admin API and dashboard on a loopback HTTP
// server over a real Redis and a temporary local registry, seeded with a
// running canary, model versions with metrics and training curves, a fleet
// and synthetic A/B sessions, for the tests of gateway/admin and parley ctl.
package admintest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/parleyhq/parley/gateway/admin"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/rollout"
	"github.com/parleyhq/parley/rollout/abtest"
	"github.com/parleyhq/parley/schema"
)

// Names of the seeded data.
const (
	Deployment = "npc"
	Model      = "npc"
	// Stable, Canary and Candidate are the seeded versions: Stable serves,
	// Canary runs at CanaryWeight, Candidate is newer and not served.
	Stable       = "v1"
	Canary       = "v2"
	Candidate    = "v3"
	CanaryWeight = 20
	// Key is the live-ops key the test server accepts, as client Operator.
	Key      = "test-live-ops-key"
	Operator = "ops-alice"
)

// Env is a seeded admin API on a loopback server.
type Env struct {
	// URL is the server's root; the API is at URL+admin.DefaultAPIPath and
	// the dashboard at URL+"/admin/".
	URL      string
	Redis    *testenv.Redis
	Rollout  *rollout.Client
	Registry *registry.Local
	Sessions *abtest.Collector
	API      *admin.API
	// ExperimentID is the canary's experiment.
	ExperimentID string
}

// APIURL is the root of the admin API.
func (e *Env) APIURL() string { return e.URL + admin.DefaultAPIPath }

// Client returns an admin client with the test key.
func (e *Env) Client() *admin.Client { return &admin.Client{BaseURL: e.APIURL(), APIKey: Key} }

// Start seeds Redis and a registry and serves the API until the test ends.
func Start(t testing.TB) *Env {
	t.Helper()
	ctx := context.Background()
	r := testenv.StartRedis(t)
	rcfg := rollout.DefaultConfig()
	// The seeded instances report once; they stay listed however slowly a
	// loaded machine runs the test.
	rcfg.Prefix, rcfg.FleetTTL = r.Prefix, 10*time.Minute
	rc, err := rollout.New(r.Client, rcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.NewLocal(filepath.Join(t.TempDir(), "registry"))
	if err != nil {
		t.Fatal(err)
	}
	created := time.Now().UTC().Add(-72 * time.Hour)
	PublishVersion(t, reg, Stable, "", created, map[string]float64{"avg_l": 5.9, "avg_r": 2.1, "ppl": 14.2, "dist_2": 0.61}, nil)
	PublishVersion(t, reg, Canary, Stable, created.Add(24*time.Hour),
		map[string]float64{"avg_l": 6.8, "avg_r": 2.6, "ppl": 13.1, "dist_2": 0.64}, SyntheticCurves(1, 6.8))
	PublishVersion(t, reg, Candidate, Canary, created.Add(48*time.Hour),
		map[string]float64{"avg_l": 7.1, "avg_r": 2.7, "ppl": 12.9, "dist_2": 0.63}, SyntheticCurves(2, 7.1))

	if _, err := rc.Init(ctx, Deployment, Stable, "deploy"); err != nil {
		t.Fatal(err)
	}
	ch, err := rc.Canary(ctx, Deployment, Canary, CanaryWeight, Operator)
	if err != nil {
		t.Fatal(err)
	}
	for i, loaded := range [][]string{{Stable, Canary}, {Stable, Canary}} {
		in := rollout.Instance{Deployment: Deployment, Instance: fmt.Sprintf("gw-%d", i+1), Generation: ch.To.Generation,
			Stable: Stable, Canary: Canary, Loaded: loaded, Sessions: 12 + 5*i}
		if err := rc.Heartbeat(ctx, in); err != nil {
			t.Fatal(err)
		}
	}

	col := abtest.NewCollector()
	now := time.Now().UTC()
	SeedSessions(col, ch.To.ExperimentID, now, 160, 40)
	PublishAnalysis(t, rc, ch.To, col, now)

	cfg := admin.DefaultConfig()
	api, err := admin.New(cfg, admin.Deps{
		Rollout: rc, Registry: reg, Curves: admin.LocalCurves{Registry: reg},
		Caller: func(c echo.Context) string { s, _ := c.Get("client").(string); return s },
	})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = admin.ErrorHandler(nil)
	api.Register(e.Group(admin.DefaultAPIPath, BearerAuth(map[string]string{Key: Operator})))
	dash := echo.WrapHandler(api.DashboardHandler())
	e.GET("/admin", dash)
	e.GET("/admin/*", dash)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &Env{URL: srv.URL, Redis: r, Rollout: rc, Registry: reg, Sessions: col, API: api, ExperimentID: ch.To.ExperimentID}
}

// PublishAnalysis publishes an analysis of st's experiment over col's
// sessions at now, as the learner's abtest.Owner would (with the default
// settings, automatic promotion off), without acting on it.
func PublishAnalysis(t testing.TB, rc *rollout.Client, st schema.RolloutState, col *abtest.Collector, now time.Time) abtest.Published {
	t.Helper()
	sessions := col.Sessions(st.ExperimentID)
	acfg := abtest.DefaultConfig()
	acfg.CanaryShare = float64(CanaryWeight) / 100 // SeedSessions splits by the weight
	rep, err := abtest.Analyze(st.ExperimentID, sessions, acfg, now)
	if err != nil {
		t.Fatal(err)
	}
	g := abtest.DefaultGuardrailConfig()
	pub := abtest.Published{Deployment: st.Deployment, ExperimentID: st.ExperimentID, Generation: st.Generation,
		At: now, By: "learner/test", Guardrails: g, Report: rep, Decision: abtest.Decide(rep, g),
		Timeline: abtest.Timeline(sessions, time.Minute, now, 120)}
	if err := rc.PublishReport(context.Background(), st.Deployment, pub); err != nil {
		t.Fatal(err)
	}
	return pub
}

// BearerAuth admits requests whose bearer key is in keys and sets the
// "client" value of the context to its client id; others get 401. It
// stands in for the gateway's API-key middleware.
func BearerAuth(keys map[string]string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			key, ok := strings.CutPrefix(c.Request().Header.Get(echo.HeaderAuthorization), "Bearer ")
			client, known := keys[key]
			if !ok || !known {
				return echo.NewHTTPError(http.StatusUnauthorized, "missing or unknown api key")
			}
			c.Set("client", client)
			return next(c)
		}
	}
}

// PublishVersion publishes a version of Model whose files are a small
// config and fake weights, plus curves.json when curves is not nil.
func PublishVersion(t testing.TB, reg *registry.Local, version, parent string, created time.Time, metrics map[string]float64, curves *schema.Curves) schema.Manifest {
	t.Helper()
	dir := filepath.Join(t.TempDir(), version)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"config.json":       []byte(`{"layers":2}`),
		"model.safetensors": []byte("fake weights of " + version),
	}
	if curves != nil {
		raw, err := json.Marshal(curves)
		if err != nil {
			t.Fatal(err)
		}
		files[schema.CurvesFile] = raw
	}
	m := schema.Manifest{
		Model: Model, Version: version, Parent: parent, Algorithm: "at-grpo", Metrics: metrics,
		Hyperparameters: map[string]any{"learning_rate": 1e-5, "group_size": 8},
		Files:           map[string]string{}, CreatedAt: created,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(body)
		m.Files[name] = hex.EncodeToString(sum[:])
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, registry.ManifestFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := reg.Publish(context.Background(), Model, version, dir)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// SyntheticCurves returns loss and Avg.L curves over 200 steps whose Avg.L
// approaches final; seed varies the noise.
func SyntheticCurves(seed uint64, final float64) *schema.Curves {
	rng := rand.New(rand.NewPCG(seed, 7))
	cv := &schema.Curves{X: "step"}
	var loss, avgL schema.CurveSeries
	loss.Name, avgL.Name = "loss", "avg_l"
	for step := 0; step <= 200; step += 10 {
		f := math.Exp(-float64(step) / 60)
		loss.Points = append(loss.Points, schema.CurvePoint{X: float64(step), Y: 1.2 + 1.8*f + 0.05*rng.NormFloat64()})
		avgL.Points = append(avgL.Points, schema.CurvePoint{X: float64(step), Y: final - 2*f + 0.1*rng.NormFloat64()})
	}
	cv.Series = []schema.CurveSeries{loss, avgL}
	return cv
}

// SeedSessions adds nStable and nCanary ended sessions of experiment to col,
// ending evenly over the hour before now; canary dialogues run about one
// exchange longer. The data is the same for the same arguments.
func SeedSessions(col *abtest.Collector, experiment string, now time.Time, nStable, nCanary int) {
	rng := rand.New(rand.NewPCG(42, 1))
	n := nStable + nCanary
	for i := range n {
		arm, version, mean := schema.ArmStable, Stable, 6.0
		if i*nCanary/n != (i+1)*nCanary/n { // nCanary of the n, spread evenly
			arm, version, mean = schema.ArmCanary, Canary, 7.0
		}
		turns := max(1, int(math.Round(mean+2*rng.NormFloat64())))
		end := now.Add(-time.Hour + time.Duration(i+1)*time.Hour/time.Duration(n+1))
		start := end.Add(-time.Duration(turns) * 20 * time.Second)
		id := fmt.Sprintf("s%04d", i)
		ev := func(k int, typ schema.EventType, at time.Time) schema.SessionEvent {
			return schema.SessionEvent{
				Schema: schema.SessionEventSchema, EventID: fmt.Sprintf("%s-%d", id, k), Type: typ, SessionID: id,
				PlayerID: fmt.Sprintf("p%04d", i), NPCID: "companion", Deployment: Deployment, PolicyVersion: version,
				ExperimentID: experiment, Arm: arm, TS: at,
			}
		}
		col.Add(ev(0, schema.SessionStarted, start))
		for k := 1; k <= turns; k++ {
			e := ev(k, schema.TurnEvent, start.Add(time.Duration(k)*20*time.Second))
			e.Turn, e.LatencyMS, e.Safety = k, 200+rng.Int64N(300), schema.SafetyNone
			col.Add(e)
		}
		e := ev(turns+1, schema.SessionEnded, end)
		e.Turns, e.Reason = turns, schema.EndPlayerEnded
		col.Add(e)
	}
}
