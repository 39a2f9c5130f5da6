package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/parleyhq/parley/schema"
)

// EventSink receives the session events of the gateway (the Kafka session
// logger in production). Publish returns once the event is as durable as
// the sink promises (sessionlog: at once past a crash of the process, and
// past a power loss once its commit window is over).
type EventSink interface {
	Publish(ctx context.Context, ev schema.SessionEvent) error
}

// Assignment is the policy a new session pins for its whole life, with the
// experiment's salt and the rollout generation it was assigned at (logged
// on every event, for the assignment audit).
type Assignment struct {
	PolicyVersion string
	Arm           string
	ExperimentID  string
	Salt          string
	Generation    int64
}

// Router chooses the policy of a new session and lends out the engine of a
// pinned version for one request. PoolRouter serves the versions of a
// modelpool.Pool by the rollout state; without a Router the gateway serves
// Deps.Engine as Config.PolicyVersion.
type Router interface {
	// Assign picks the version and arm a new session of playerID pins.
	Assign(ctx context.Context, playerID string) (Assignment, error)
	// Acquire returns the engine of version and a func to call once the
	// request is done with it; errors wrap ErrUnavailable when it cannot be
	// served now.
	Acquire(ctx context.Context, version string) (Generator, func(), error)
	// Ready reports why new sessions cannot be served yet, or nil.
	Ready() error
}

// Deps are the running parts a Server uses.
type Deps struct {
	Redis redis.UniversalClient
	// Events receives every session_started, turn and session_ended.
	Events EventSink
	// Engine generates replies; nil until SetEngine is called (the server
	// then answers 503 and /readyz fails). Ignored when Router is set.
	Engine Generator
	Router Router

	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Propagator     propagation.TextMapPropagator
	// MetricsHandler serves /metrics (telemetry.Telemetry.MetricsHandler).
	MetricsHandler http.Handler
	// Now is the clock (time.Now when nil); tests move it to expire sessions.
	Now func() time.Time
}

// Server is the gateway: the player API, the OpenAI-compatible endpoint,
// the admin API and the ops endpoints, over sessions in Redis.
type Server struct {
	cfg            Config
	rdb            redis.UniversalClient
	events         EventSink
	router         Router
	static         *staticRouter
	log            *slog.Logger
	now            func() time.Time
	guard          Guard
	echo           *echo.Echo
	handler        http.Handler
	metrics        *metrics
	tracer         trace.Tracer
	metricsHandler http.Handler
	keys           *keyCache
	stranded       strandedLocks
	replicas       replicaWait
}

// New checks cfg and builds a Server; Run serves it.
func New(cfg Config, deps Deps) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Redis == nil || deps.Events == nil {
		return nil, errors.New("gateway: redis client and event sink are required")
	}
	s := &Server{
		cfg: cfg.clone(), rdb: deps.Redis, events: deps.Events, router: deps.Router,
		log: deps.Logger, now: deps.Now, metricsHandler: deps.MetricsHandler,
		keys: newKeyCache(cfg.KeyCacheTTL, cfg.KeyCacheSize), guard: NewGuard(cfg.Personas),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.router == nil {
		s.static = &staticRouter{version: cfg.PolicyVersion}
		if deps.Engine != nil {
			s.static.gen.Store(&deps.Engine)
		}
		s.router = s.static
	}
	tp, mp := deps.TracerProvider, deps.MeterProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	prop := deps.Propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	m, err := newMetrics(mp.Meter("github.com/parleyhq/parley/gateway"))
	if err != nil {
		return nil, err
	}
	s.metrics = m
	if err := m.observeActive(mp.Meter("github.com/parleyhq/parley/gateway"), s.countActive); err != nil {
		return nil, err
	}
	s.tracer = tp.Tracer("github.com/parleyhq/parley/gateway")
	s.echo = s.routes()
	s.handler = otelhttp.NewHandler(s.echo, "gateway",
		otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(mp), otelhttp.WithPropagators(prop),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
	return s, nil
}

// SetEngine installs the engine that serves version (when no Router was
// given); sessions created before keep their pinned version name.
func (s *Server) SetEngine(version string, g Generator) error {
	if s.static == nil {
		return errors.New("gateway: SetEngine with a Router; swap engines through the Router")
	}
	if version == "" || g == nil {
		return errors.New("gateway: SetEngine needs a version and a generator")
	}
	s.static.mu.Lock()
	s.static.version = version
	s.static.mu.Unlock()
	s.static.gen.Store(&g)
	return nil
}

// Handler is the gateway's whole HTTP handler, for tests and for mounting.
func (s *Server) Handler() http.Handler { return s.handler }

// Run serves on Config.Addr and sweeps idle sessions until ctx is done, then
// stops accepting requests and waits (up to ShutdownTimeout) for in-flight
// ones, streams included, to finish.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("gateway: listen on %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve is Run on a listener that the caller opened.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       s.cfg.RequestTimeout,
		IdleTimeout:       2 * time.Minute,
	}
	s.log.Info("gateway listening", "url", "http://"+ln.Addr().String(), "deployment", s.cfg.Deployment)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	sweepDone := make(chan struct{})
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	go func() {
		defer close(sweepDone)
		s.sweepLoop(sweepCtx)
	}()

	select {
	case <-ctx.Done():
	case err := <-errc:
		stopSweep()
		<-sweepDone
		return fmt.Errorf("gateway: serve: %w", err)
	}
	s.log.Info("gateway shutting down: finishing in-flight requests")
	stopSweep()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	<-sweepDone
	if err != nil {
		return fmt.Errorf("gateway: shutdown: %w", err)
	}
	return nil
}

func (s *Server) sweepLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("sweep idle sessions", "err", err)
			} else if n > 0 {
				s.log.Debug("ended idle sessions", "count", n)
			}
		}
	}
}

// routes builds the echo router.
func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.errorHandler
	e.Use(s.observe, s.recover, limitBody(s.cfg.MaxBodyBytes))

	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", func(c echo.Context) error {
		if s.metricsHandler == nil {
			return fmt.Errorf("%w: no metrics handler", ErrNotFound)
		}
		s.metricsHandler.ServeHTTP(c.Response(), c.Request())
		return nil
	})
	e.GET("/openapi.json", openAPIHandler)

	// Middleware goes on each route, not on the groups: echo gives a group
	// with middleware catch-all routes that answer 404 where 405 is right.
	v1 := routes{g: e.Group("/v1"), m: []echo.MiddlewareFunc{s.authenticate}}
	v1.POST("/sessions", s.createSessionHandler)
	v1.POST("/sessions/:id/messages", s.messageHandler)
	v1.POST("/sessions/:id/end", s.endSessionHandler)
	v1.GET("/sessions/:id", s.getSessionHandler)
	v1.POST("/chat/completions", s.chatCompletionsHandler)
	v1.GET("/models", s.modelsHandler)

	s.adminRoutes(e).GET("/status", s.statusHandler)
	return e
}

// Admin is where the admin API adds its routes (/admin/v1): each route it
// adds admits live-ops and admin keys only.
func (s *Server) Admin() Routes { return s.adminRoutes(s.echo) }

func (s *Server) adminRoutes(e *echo.Echo) routes {
	return routes{g: e.Group("/admin/v1"), m: []echo.MiddlewareFunc{s.authenticate, requireRole(RoleLiveOps, RoleAdmin)}}
}

// Routes adds GET and POST routes under a prefix; *echo.Group implements it.
type Routes interface {
	GET(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route
	POST(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route
}

// routes puts its middleware in front of every route it adds.
type routes struct {
	g *echo.Group
	m []echo.MiddlewareFunc
}

func (r routes) GET(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route {
	return r.g.GET(path, h, append(r.m, m...)...)
}

func (r routes) POST(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route {
	return r.g.POST(path, h, append(r.m, m...)...)
}

// recover turns a panic in a handler into a 500 (logged with its stack).
func (s *Server) recover(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				s.log.Error("panic in handler", "route", c.Path(), "panic", r, "stack", string(debug.Stack()))
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return next(c)
	}
}

// MountPublic serves h, without authentication, for GET and HEAD at exactly
// the given paths (the admin dashboard's page and assets). Paths under them
// stay with the routes that own them, such as the admin API under /admin/v1.
func (s *Server) MountPublic(h http.Handler, paths ...string) {
	wh := echo.WrapHandler(h)
	for _, p := range paths {
		s.echo.GET(p, wh)
		s.echo.HEAD(p, wh)
	}
}

// observe names the request's span after its route and records request metrics.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		// A span that records nothing (no tracer configured) would drop
		// the name and attribute: they are not built for it.
		if span := trace.SpanFromContext(c.Request().Context()); span.IsRecording() {
			span.SetName(c.Request().Method + " " + route)
			span.SetAttributes(attribute.String("http.route", route))
		}
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		status, d := c.Response().Status, time.Since(start)
		s.metrics.request(c.Request().Context(), route, c.Request().Method, status, d)
		if s.log.Enabled(context.Background(), slog.LevelDebug) { // as Debug checks, before its arguments are boxed
			s.log.Debug("request", "method", c.Request().Method, "route", route, "status", status, "duration", d)
		}
		return nil
	}
}

func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%w: redis: %w", ErrUnavailable, err)
	}
	if err := s.router.Ready(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return c.String(http.StatusOK, "ready\n")
}

// AdminStatus answers GET /admin/v1/status.
type AdminStatus struct {
	Deployment     string `json:"deployment"`
	PolicyVersion  string `json:"policy_version,omitempty"`
	ActiveSessions int64  `json:"active_sessions"`
}

func (s *Server) statusHandler(c echo.Context) error {
	n, err := s.countActive(c.Request().Context())
	if err != nil {
		return fmt.Errorf("count active sessions: %w", err)
	}
	st := AdminStatus{Deployment: s.cfg.Deployment, ActiveSessions: n}
	if s.static != nil {
		st.PolicyVersion = s.static.currentVersion()
	}
	return c.JSON(http.StatusOK, st)
}

// countActive counts the sessions not yet ended, across all gateways.
func (s *Server) countActive(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return s.rdb.ZCard(ctx, s.activeKey()).Result()
}

// staticRouter serves one engine as one version to every session.
type staticRouter struct {
	mu      sync.Mutex
	version string
	gen     atomic.Pointer[Generator]
}

func (r *staticRouter) currentVersion() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.version
}

func (r *staticRouter) generator() (Generator, error) {
	g := r.gen.Load()
	if g == nil {
		return nil, fmt.Errorf("%w: no model loaded", ErrUnavailable)
	}
	return *g, nil
}

func (r *staticRouter) Assign(context.Context, string) (Assignment, error) {
	_, err := r.generator()
	return Assignment{PolicyVersion: r.currentVersion()}, err
}

func (r *staticRouter) Acquire(context.Context, string) (Generator, func(), error) {
	g, err := r.generator()
	return g, func() {}, err
}

func (r *staticRouter) Ready() error {
	_, err := r.generator()
	return err
}
