package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
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
}

// DefaultConfig returns the settings for deployment and model "npc".
func DefaultConfig() Config {
	return Config{Deployment: "npc", Model: "npc", APIPath: DefaultAPIPath, HistoryLen: 20}
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
	}
	return nil
}

// Deps are the parts an API reads and changes.
type Deps struct {
	Rollout  *rollout.Client
	Registry registry.Store
	// Curves gives candidates' training curves; nil: none are shown.
	Curves CurveSource
	// Caller names the authenticated caller of a request (the client id of
	// its API key); it is recorded as who made a rollout change.
	Caller func(echo.Context) string
	Logger *slog.Logger
}

// API serves the admin API and the dashboard. The A/B report and timeline
// are the ones the learner's analysis (abtest.Owner) published in Redis:
// no gateway analyses the experiment itself.
type API struct {
	cfg      Config
	rollout  *rollout.Client
	registry registry.Store
	curves   CurveSource
	caller   func(echo.Context) string
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
		caller: deps.Caller, log: deps.Logger,
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
	g.POST("/rollout/advance", a.change(rollout.ActionAdvance))
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

// ChangeRequest is the optional body of advance, promote, rollback, pause
// and resume.
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

// ExperimentReport answers GET /report: the last A/B analysis the
// learner published — the report, what the guardrails and the sequential
// test recommend, the assignment audit, the settings it runs with (auto
// promotion among them) and what it did.
type ExperimentReport struct {
	abtest.Published
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
		Action: rollout.ActionCanary, Version: req.Version, Weight: req.Weight, Steps: req.Steps,
		MinStepPlayers: req.MinStepPlayers, Generation: req.Generation,
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

// published returns the analysis the learner last published for the
// deployment, which must be of the ?experiment= of the request when one is
// named.
func (a *API) published(c echo.Context) (abtest.Published, error) {
	var pub abtest.Published
	d := a.deployment(c)
	if err := a.rollout.ReadReport(c.Request().Context(), d, &pub); err != nil {
		if errors.Is(err, rollout.ErrNotFound) {
			return pub, echo.NewHTTPError(http.StatusNotFound,
				fmt.Sprintf("no A/B analysis of deployment %s has been published: the learner publishes one while a canary runs", d)).SetInternal(err)
		}
		return pub, err
	}
	if id := c.QueryParam("experiment"); id != "" && id != pub.ExperimentID {
		return pub, echo.NewHTTPError(http.StatusNotFound,
			fmt.Sprintf("the published analysis is of experiment %s, not %s", pub.ExperimentID, id))
	}
	return pub, nil
}

func (a *API) report(c echo.Context) error {
	pub, err := a.published(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ExperimentReport{Published: pub})
}

func (a *API) timeline(c echo.Context) error {
	pub, err := a.published(c)
	if err != nil {
		return err
	}
	pts := pub.Timeline
	if pts == nil {
		pts = []abtest.Point{}
	}
	return c.JSON(http.StatusOK, Timeline{ExperimentID: pub.ExperimentID, Points: pts})
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
