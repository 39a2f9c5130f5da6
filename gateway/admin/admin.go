package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/rollout"
	"github.com/parleyhq/parley/rollout/abtest"
	"github.com/parleyhq/parley/schema"
)

// DefaultAPIPath is where the gateway mounts the admin API; the dashboard
// calls it there unless Config.APIPath says otherwise.
const DefaultAPIPath = "/admin/v1"

// maxBody bounds the JSON body of a change request.
const maxBody = 64 << 10

// Config configures an API.
type Config struct {
	// Deployment is the rollout a request without ?deployment= reads and changes.
	Deployment string
	// Model is the registry model a request without ?model= lists.
	Model string
	// APIPath is the path the API is mounted at, for the dashboard's calls.
	APIPath string
	// HistoryLen is how many recent rollout changes GET /rollout returns.
	HistoryLen int64
	// Analysis and Guardrails configure the A/B report and its decision
	// (the same settings as the learner's abtest.Watchdog, so the report
	// shows what the watchdog would do).
	Analysis   abtest.Config
	Guardrails abtest.GuardrailConfig
	// TimelineStep and TimelinePoints are the default spacing and the most
	// points per arm of GET /timeline.
	TimelineStep   time.Duration
	TimelinePoints int
}

// DefaultConfig returns the settings for deployment and model "npc".
func DefaultConfig() Config {
	return Config{
		Deployment: "npc", Model: "npc", APIPath: DefaultAPIPath, HistoryLen: 20,
		Analysis: abtest.DefaultConfig(), Guardrails: abtest.DefaultGuardrailConfig(),
		TimelineStep: time.Minute, TimelinePoints: 120,
	}
}

// Validate reports the first setting out of range.
func (c Config) Validate() error {
	switch {
	case c.Deployment == "" || c.Model == "":
		return errors.New("admin config: deployment and model are required")
	case c.APIPath == "" || c.APIPath[0] != '/':
		return fmt.Errorf("admin config: api path %q must start with /", c.APIPath)
	case c.HistoryLen < 1:
		return fmt.Errorf("admin config: history length %d must be at least 1", c.HistoryLen)
	case c.TimelineStep <= 0:
		return fmt.Errorf("admin config: timeline step %v must be positive", c.TimelineStep)
	case c.TimelinePoints < 2:
		return fmt.Errorf("admin config: timeline points %d must be at least 2", c.TimelinePoints)
	}
	return errors.Join(c.Analysis.Validate(), c.Guardrails.Validate())
}

// SessionSource gives the session summaries of an experiment;
// *abtest.Collector implements it.
type SessionSource interface {
	Sessions(experimentID string) []abtest.Session
}

var _ SessionSource = (*abtest.Collector)(nil)

// Deps are the parts an API reads and changes.
type Deps struct {
	Rollout  *rollout.Client
	Registry registry.Store
	// Curves gives candidates' training curves; nil: none are shown.
	Curves CurveSource
	// Sessions feeds the A/B report and timeline; nil: they answer 503.
	Sessions SessionSource
	// Caller names the authenticated caller of a request (the client id of
	// its API key); it is recorded as who made a rollout change.
	Caller func(echo.Context) string
	// Now is the clock of reports (time.Now when nil).
	Now    func() time.Time
	Logger *slog.Logger
}

// API serves the admin API and the dashboard.
type API struct {
	cfg      Config
	rollout  *rollout.Client
	registry registry.Store
	curves   CurveSource
	sessions SessionSource
	caller   func(echo.Context) string
	now      func() time.Time
	log      *slog.Logger
}

// New checks cfg and deps and returns an API.
func New(cfg Config, deps Deps) (*API, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Rollout == nil || deps.Registry == nil || deps.Caller == nil {
		return nil, errors.New("admin: rollout client, registry and caller are required")
	}
	a := &API{
		cfg: cfg, rollout: deps.Rollout, registry: deps.Registry, curves: deps.Curves,
		sessions: deps.Sessions, caller: deps.Caller, now: deps.Now, log: deps.Logger,
	}
	if a.now == nil {
		a.now = time.Now
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	return a, nil
}

// Routes adds GET and POST routes under the API's path; *echo.Group and the
// gateway's Admin() implement it.
type Routes interface {
	GET(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route
	POST(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route
}

// Register adds the admin routes to g, which must authenticate the caller
// and admit only live-ops and admin keys.
func (a *API) Register(g Routes) {
	g.GET("/rollout", a.getRollout)
	g.POST("/rollout/canary", a.canary)
	g.POST("/rollout/promote", a.change(rollout.ActionPromote))
	g.POST("/rollout/rollback", a.change(rollout.ActionRollback))
	g.POST("/rollout/pause", a.change(rollout.ActionPause))
	g.POST("/rollout/resume", a.change(rollout.ActionResume))
	g.GET("/models", a.listModels)
	g.GET("/models/diff", a.diffModels)
	g.GET("/models/:version", a.getModel)
	g.GET("/models/:version/curves", a.getCurves)
	g.GET("/report", a.report)
	g.GET("/timeline", a.timeline)
}

// RolloutStatus answers GET /rollout.
type RolloutStatus struct {
	State schema.RolloutState `json:"state"`
	// Fleet lists the live gateway instances and what each has loaded.
	Fleet []rollout.Instance `json:"fleet"`
	// History holds the most recent changes, oldest first.
	History []schema.RolloutChange `json:"history"`
}

// ChangeRequest is the optional body of promote, rollback, pause and resume.
type ChangeRequest struct {
	// Generation, when set, makes the change a compare-and-set: it fails
	// with 409 if the rollout has moved on from this generation.
	Generation *int64 `json:"generation,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// ModelVersion is one version in GET /models: its manifest and what the
// rollout serves it as ("stable", "canary" or "").
type ModelVersion struct {
	schema.Manifest
	Serving string `json:"serving,omitempty"`
}

// ModelList answers GET /models.
type ModelList struct {
	Model    string         `json:"model"`
	Versions []ModelVersion `json:"versions"`
}

// ModelDiff answers GET /models/diff.
type ModelDiff struct {
	Model   string                `json:"model"`
	A       string                `json:"a"`
	B       string                `json:"b"`
	Metrics []registry.MetricDiff `json:"metrics"`
}

// ExperimentReport answers GET /report: the A/B report and what the
// guardrails and the sequential test recommend.
type ExperimentReport struct {
	Report   abtest.Report   `json:"report"`
	Decision abtest.Decision `json:"decision"`
}

// Timeline answers GET /timeline: each arm's cumulative Avg.L with its
// 95 % CI over time.
type Timeline struct {
	ExperimentID string         `json:"experiment_id"`
	Points       []abtest.Point `json:"points"`
}

func (a *API) deployment(c echo.Context) string {
	if d := c.QueryParam("deployment"); d != "" {
		return d
	}
	return a.cfg.Deployment
}

func (a *API) model(c echo.Context) string {
	if m := c.QueryParam("model"); m != "" {
		return m
	}
	return a.cfg.Model
}

func (a *API) getRollout(c echo.Context) error {
	ctx, d := c.Request().Context(), a.deployment(c)
	st, err := a.rollout.Get(ctx, d)
	if err != nil {
		return rolloutError(err)
	}
	fleet, err := a.rollout.Fleet(ctx, d)
	if err != nil {
		return err
	}
	hist, err := a.rollout.History(ctx, d, a.cfg.HistoryLen)
	if err != nil {
		return err
	}
	if fleet == nil {
		fleet = []rollout.Instance{}
	}
	if hist == nil {
		hist = []schema.RolloutChange{}
	}
	return c.JSON(http.StatusOK, RolloutStatus{State: st, Fleet: fleet, History: hist})
}

func (a *API) canary(c echo.Context) error {
	var req schema.CanaryRequest
	if err := bindJSON(c, &req, true); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return badRequest(err)
	}
	// Only a published version may become a canary: a typo would otherwise
	// reach the rollout state and, once promoted, leave new gateways with
	// nothing they can load.
	if _, err := a.registry.Manifest(c.Request().Context(), a.model(c), req.Version); err != nil {
		return registryError(err)
	}
	return a.apply(c, rollout.Request{
		Action: rollout.ActionCanary, Version: req.Version, Weight: req.Weight, Generation: req.Generation,
	})
}

func (a *API) change(action rollout.Action) echo.HandlerFunc {
	return func(c echo.Context) error {
		var req ChangeRequest
		if err := bindJSON(c, &req, false); err != nil {
			return err
		}
		return a.apply(c, rollout.Request{Action: action, Generation: req.Generation, Reason: req.Reason})
	}
}

// apply makes one change as the caller and answers it with the
// schema.RolloutChange that was recorded.
func (a *API) apply(c echo.Context, req rollout.Request) error {
	req.By = a.caller(c)
	if req.By == "" {
		return echo.NewHTTPError(http.StatusForbidden, "the caller of this request is unknown")
	}
	ch, err := a.rollout.Apply(c.Request().Context(), a.deployment(c), req)
	if err != nil {
		return rolloutError(err)
	}
	a.log.Info("rollout changed through the admin api", "deployment", ch.To.Deployment, "action", req.Action,
		"by", req.By, "generation", ch.To.Generation)
	return c.JSON(http.StatusOK, ch)
}

func (a *API) listModels(c echo.Context) error {
	ctx, model := c.Request().Context(), a.model(c)
	mans, err := a.registry.List(ctx, model)
	if err != nil {
		return registryError(err)
	}
	serving := map[string]string{}
	if st, err := a.rollout.Get(ctx, a.deployment(c)); err == nil {
		serving[st.Stable] = schema.ArmStable
		if st.Canary != "" && st.State != schema.PhaseSteady {
			serving[st.Canary] = schema.ArmCanary
		}
	} else if !errors.Is(err, rollout.ErrNotFound) {
		return err
	}
	out := ModelList{Model: model, Versions: make([]ModelVersion, 0, len(mans))}
	for _, m := range mans {
		out.Versions = append(out.Versions, ModelVersion{Manifest: m, Serving: serving[m.Version]})
	}
	return c.JSON(http.StatusOK, out)
}

func (a *API) getModel(c echo.Context) error {
	m, err := a.registry.Manifest(c.Request().Context(), a.model(c), c.Param("version"))
	if err != nil {
		return registryError(err)
	}
	return c.JSON(http.StatusOK, m)
}

func (a *API) diffModels(c echo.Context) error {
	va, vb := c.QueryParam("a"), c.QueryParam("b")
	if va == "" || vb == "" {
		return echo.NewHTTPError(http.StatusBadRequest, "query parameters a and b name the two versions to compare")
	}
	ctx, model := c.Request().Context(), a.model(c)
	ma, err := a.registry.Manifest(ctx, model, va)
	if err != nil {
		return registryError(err)
	}
	mb, err := a.registry.Manifest(ctx, model, vb)
	if err != nil {
		return registryError(err)
	}
	return c.JSON(http.StatusOK, ModelDiff{Model: model, A: va, B: vb, Metrics: registry.DiffMetrics(ma, mb)})
}

func (a *API) getCurves(c echo.Context) error {
	if a.curves == nil {
		return echo.NewHTTPError(http.StatusNotFound, "this gateway has no source of training curves")
	}
	cv, err := a.curves.Curves(c.Request().Context(), a.model(c), c.Param("version"))
	if err != nil {
		return registryError(err)
	}
	return c.JSON(http.StatusOK, cv)
}

// experiment returns the ?experiment= of a request, or the experiment of
// the deployment's current (or last rolled back) canary.
func (a *API) experiment(c echo.Context) (string, error) {
	if a.sessions == nil {
		return "", echo.NewHTTPError(http.StatusServiceUnavailable, "this gateway has no source of experiment sessions")
	}
	if id := c.QueryParam("experiment"); id != "" {
		return id, nil
	}
	st, err := a.rollout.Get(c.Request().Context(), a.deployment(c))
	if err != nil {
		return "", rolloutError(err)
	}
	if st.ExperimentID == "" {
		return "", echo.NewHTTPError(http.StatusNotFound,
			fmt.Sprintf("deployment %s runs no experiment; name one with ?experiment=", st.Deployment))
	}
	return st.ExperimentID, nil
}

func (a *API) report(c echo.Context) error {
	id, err := a.experiment(c)
	if err != nil {
		return err
	}
	rep, err := abtest.Analyze(id, a.sessions.Sessions(id), a.cfg.Analysis, a.now())
	if err != nil {
		return fmt.Errorf("analyze experiment %q: %w", id, err)
	}
	return c.JSON(http.StatusOK, ExperimentReport{Report: rep, Decision: abtest.Decide(rep, a.cfg.Guardrails)})
}

func (a *API) timeline(c echo.Context) error {
	id, err := a.experiment(c)
	if err != nil {
		return err
	}
	step := a.cfg.TimelineStep
	if s := c.QueryParam("step"); s != "" {
		if step, err = time.ParseDuration(s); err != nil || step <= 0 {
			return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("step %q is not a positive duration such as 30s or 5m", s))
		}
	}
	points := a.cfg.TimelinePoints
	if s := c.QueryParam("points"); s != "" {
		if points, err = strconv.Atoi(s); err != nil || points < 2 || points > 10000 {
			return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("points %q must be a number from 2 to 10000", s))
		}
	}
	pts := abtest.Timeline(a.sessions.Sessions(id), step, a.now(), points)
	if pts == nil {
		pts = []abtest.Point{}
	}
	return c.JSON(http.StatusOK, Timeline{ExperimentID: id, Points: pts})
}

// bindJSON decodes a request body into v, rejecting unknown fields; an
// empty body is an error only when required.
func bindJSON(c echo.Context, v any, required bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return echo.NewHTTPError(http.StatusRequestEntityTooLarge, fmt.Sprintf("body is over %d bytes", maxBody))
		}
		return fmt.Errorf("read request body: %w", err)
	}
	if len(body) == 0 {
		if required {
			return echo.NewHTTPError(http.StatusBadRequest, "a JSON body is required")
		}
		return nil
	}
	if !utf8.Valid(body) {
		return badRequest(errors.New("body is not valid UTF-8"))
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest(fmt.Errorf("body is not the expected JSON: %w", err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest(errors.New("body has data after the JSON value"))
	}
	return nil
}

func badRequest(err error) error {
	return echo.NewHTTPError(http.StatusBadRequest, err.Error()).SetInternal(err)
}

// rolloutError maps the rollout package's sentinels to statuses; other
// errors (Redis out of reach) go to the gateway's error handler as they are.
func rolloutError(err error) error {
	switch {
	case errors.Is(err, rollout.ErrNotFound):
		return echo.NewHTTPError(http.StatusNotFound, err.Error()).SetInternal(err)
	case errors.Is(err, rollout.ErrConflict), errors.Is(err, rollout.ErrTransition):
		return echo.NewHTTPError(http.StatusConflict, err.Error()).SetInternal(err)
	}
	return err
}

func registryError(err error) error {
	if errors.Is(err, registry.ErrNotFound) {
		return echo.NewHTTPError(http.StatusNotFound, err.Error()).SetInternal(err)
	}
	return err
}
