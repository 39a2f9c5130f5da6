// Package modelpool keeps the model versions a gateway serves resident and
// swaps them without dropping a request (DESIGN.md §9). A Pool fetches a new
// version from the registry in the background, loads it through a Factory
// (which verifies checksums and warms it up), and only then switches the
// rollout state it serves; sessions hold the engine of the version they
// started with (Acquire) and an engine is closed when its last session ends
// and it is no longer stable or canary. At most Config.MaxResident engines
// exist at once.
package modelpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/parleyhq/parley/rollout"
	"github.com/parleyhq/parley/schema"
)

// Errors callers branch on.
var (
	// ErrFull is returned by Acquire when a version is not resident and every
	// slot holds a version that is in use or served.
	ErrFull = errors.New("modelpool: no free slot for another version")
	// ErrRefused is wrapped by errors for a version that failed to fetch,
	// verify, load or warm up; the pool does not retry it until the rollout
	// state changes.
	ErrRefused = errors.New("modelpool: version refused")
	// ErrClosed is returned once the pool is closed.
	ErrClosed = errors.New("modelpool: closed")
)

// Fetcher copies a verified version into a new local directory
// (registry.Store implements it).
type Fetcher interface {
	Fetch(ctx context.Context, model, version, dst string) (schema.Manifest, error)
}

// Factory builds engines. Load must verify checksums (inference.LoadCheckpoint
// does) and may keep nothing of dir, which the pool deletes after Load
// returns; Warmup runs a short generation before the version is served (nil:
// none); Close frees an engine (nil: nothing to free).
type Factory[E any] struct {
	Load   func(ctx context.Context, version, dir string) (E, error)
	Warmup func(ctx context.Context, e E) error
	Close  func(e E) error
}

// Config configures a Pool.
type Config struct {
	// Model is the registry model whose versions are served.
	Model string
	// MaxResident is how many engines may exist at once (loading ones
	// included): 2 holds stable and canary, 3 also lets a promoted-away
	// version drain while the next canary loads.
	MaxResident int
	// WorkDir receives fetched versions while they load.
	WorkDir string
}

// DefaultConfig returns three resident versions.
func DefaultConfig() Config { return Config{Model: "npc", MaxResident: 3} }

// Validate reports the first setting out of range.
func (c Config) Validate() error {
	switch {
	case c.Model == "":
		return errors.New("modelpool config: model is required")
	case c.MaxResident < 2:
		return fmt.Errorf("modelpool config: max resident %d must be at least 2 (stable and canary)", c.MaxResident)
	case c.WorkDir == "":
		return errors.New("modelpool config: work dir is required")
	}
	return nil
}

// Status is what a pool serves and holds, for the fleet heartbeat.
type Status struct {
	// Serving is the rollout state whose versions are all loaded; new
	// sessions are routed by it. Generation 0 until the first one.
	Serving schema.RolloutState `json:"serving"`
	// Wanted is the last state given to Apply.
	Wanted schema.RolloutState `json:"wanted"`
	// Loaded lists the resident versions, Loading those being loaded.
	Loaded  []string `json:"loaded"`
	Loading []string `json:"loading,omitempty"`
	// Sessions counts Acquire holds per version.
	Sessions map[string]int `json:"sessions"`
	// Failed maps refused versions to why.
	Failed map[string]string `json:"failed,omitempty"`
}

// Instance turns s into the fleet entry of one gateway instance, for
// rollout.Client.Heartbeat.
func (s Status) Instance(deployment, instance string) rollout.Instance {
	in := rollout.Instance{
		Deployment: deployment, Instance: instance, Generation: s.Serving.Generation,
		Stable: s.Serving.Stable, Canary: s.Serving.Canary, Loaded: s.Loaded, Loading: strings.Join(s.Loading, ","),
	}
	for _, n := range s.Sessions {
		in.Sessions += n
	}
	var failed []string
	for v, why := range s.Failed {
		failed = append(failed, v+": "+why)
	}
	slices.Sort(failed)
	in.LastError = strings.Join(failed, "; ")
	return in
}

type entry[E any] struct {
	engine E
	refs   int
	ready  chan struct{} // closed when the load ends, well or not
	err    error
}

// Pool holds the resident engines. It is safe for concurrent use.
type Pool[E any] struct {
	cfg   Config
	store Fetcher
	f     Factory[E]
	log   *slog.Logger
	poke  chan struct{}

	mu      sync.Mutex
	entries map[string]*entry[E]
	serving schema.RolloutState
	full    bool // serving is wanted itself, not an interim with its canary paused
	wanted  schema.RolloutState
	failed  map[string]error
	closed  bool
	changed chan struct{} // closed and replaced on every change
}

// New returns an empty pool; call Run to have it follow Apply.
func New[E any](cfg Config, store Fetcher, f Factory[E], log *slog.Logger) (*Pool[E], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if f.Load == nil {
		return nil, errors.New("modelpool: factory has no Load")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("modelpool work dir %q: %w", cfg.WorkDir, err)
	}
	return &Pool[E]{
		cfg: cfg, store: store, f: f, log: log, poke: make(chan struct{}, 1),
		entries: map[string]*entry[E]{}, failed: map[string]error{}, changed: make(chan struct{}),
	}, nil
}

// Apply asks the pool to serve s: Run loads its versions in the background
// and switches Serving to s once all of them are ready. Apply never blocks;
// a newer state replaces one not yet applied.
func (p *Pool[E]) Apply(s schema.RolloutState) {
	p.mu.Lock()
	if s.Generation <= p.wanted.Generation && p.wanted.Generation != 0 {
		p.mu.Unlock()
		return
	}
	p.wanted = s
	for _, v := range targets(s) {
		delete(p.failed, v) // a new state gives a refused version another try
	}
	p.notifyLocked()
	p.mu.Unlock()
	select {
	case p.poke <- struct{}{}:
	default:
	}
}

// Serving returns the state new sessions are routed by (see rollout.Route).
func (p *Pool[E]) Serving() schema.RolloutState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.serving
}

// Run applies the states given to Apply until ctx is done. A version that
// fails is logged, listed in Status.Failed and not retried until the next
// Apply; the pool goes on serving what it served.
func (p *Pool[E]) Run(ctx context.Context) error {
	for {
		p.mu.Lock()
		want, done := p.wanted, p.wanted.Generation == 0 || p.wanted.Generation == p.serving.Generation && p.full
		// Taken before reconcile, so that a release while it runs still
		// wakes the loop.
		changed := p.changed
		p.mu.Unlock()
		if !done {
			p.reconcile(ctx, want)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.poke:
		case <-changed:
			// A release may have freed a slot a load is waiting for.
		}
	}
}

func (p *Pool[E]) changedChan() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// reconcile loads want's versions and switches to it when all are ready.
// When the canary finds no free slot (the slots hold the versions the pool
// serves now), it first serves want with the canary paused, so that the
// versions only the old state needed can be released, and tries again.
func (p *Pool[E]) reconcile(ctx context.Context, want schema.RolloutState) {
	if !p.loadTarget(ctx, want.Stable) {
		return
	}
	if c := canaryOf(want); c != "" {
		err := p.tryLoad(ctx, c)
		if errors.Is(err, ErrFull) && want.State == schema.PhaseCanary {
			interim := want
			interim.State = schema.PhasePaused
			p.switchTo(want, interim, false)
			err = p.tryLoad(ctx, c)
		}
		if err != nil {
			return // refused (logged), or no slot yet: retried on the next change
		}
	}
	p.switchTo(want, want, true)
}

func (p *Pool[E]) loadTarget(ctx context.Context, version string) bool {
	return p.tryLoad(ctx, version) == nil
}

// tryLoad loads version unless it was refused since the last Apply. Failures
// are logged where they happen (loadLocked), once.
func (p *Pool[E]) tryLoad(ctx context.Context, version string) error {
	p.mu.Lock()
	err, refused := p.failed[version]
	p.mu.Unlock()
	if refused {
		return err
	}
	_, err = p.ensure(ctx, version)
	return err
}

// switchTo serves s (want itself when full, else want with its canary
// paused) unless want has been superseded meanwhile.
func (p *Pool[E]) switchTo(want, s schema.RolloutState, full bool) {
	p.mu.Lock()
	if want.Generation != p.wanted.Generation {
		p.mu.Unlock()
		return
	}
	from := p.serving
	if reflect.DeepEqual(from, s) && p.full == full {
		p.mu.Unlock()
		return
	}
	p.serving, p.full = s, full
	victims := p.evictLocked()
	p.notifyLocked()
	p.mu.Unlock()
	p.closeAll(victims)
	p.log.Info("serving rollout state", "generation", s.Generation, "state", s.State, "stable", s.Stable,
		"canary", s.Canary, "weight", s.CanaryWeight, "complete", full, "from_generation", from.Generation)
}

// ensure returns the entry of a loaded version, loading it if needed (or
// waiting for a load in progress).
func (p *Pool[E]) ensure(ctx context.Context, version string) (*entry[E], error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		if err, ok := p.failed[version]; ok {
			p.mu.Unlock()
			return nil, fmt.Errorf("version %s: %w", version, err)
		}
		e := p.entries[version]
		if e == nil {
			return p.loadLocked(ctx, version) // unlocks
		}
		p.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.err == nil {
			return e, nil
		}
		// The load failed; the loop reports it from failed, or retries
		// after a cancelled load.
	}
}

// loadLocked claims a slot for version, unlocks p.mu, and loads it.
func (p *Pool[E]) loadLocked(ctx context.Context, version string) (*entry[E], error) {
	var victims []E
	if len(p.entries) >= p.cfg.MaxResident {
		victims = p.evictLocked()
	}
	if n := len(p.entries); n >= p.cfg.MaxResident {
		p.mu.Unlock()
		p.closeAll(victims)
		return nil, fmt.Errorf("load %s: %d versions resident: %w", version, n, ErrFull)
	}
	e := &entry[E]{ready: make(chan struct{})}
	p.entries[version] = e
	p.notifyLocked()
	p.mu.Unlock()
	p.closeAll(victims)

	eng, err := p.load(ctx, version)

	p.mu.Lock()
	e.engine, e.err = eng, err
	if err != nil {
		delete(p.entries, version)
		if ctx.Err() == nil {
			p.failed[version] = fmt.Errorf("%w: %w", ErrRefused, err)
			p.log.Error("model version refused; serving the previous versions", "version", version, "err", err)
		}
	}
	close(e.ready)
	p.notifyLocked()
	p.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("version %s: %w", version, err)
		}
		return nil, fmt.Errorf("version %s: %w: %w", version, ErrRefused, err)
	}
	p.log.Info("model version loaded", "version", version)
	return e, nil
}

// load fetches, loads and warms up one version.
func (p *Pool[E]) load(ctx context.Context, version string) (E, error) {
	var zero E
	dir, err := os.MkdirTemp(p.cfg.WorkDir, "fetch-"+version+"-")
	if err != nil {
		return zero, err
	}
	defer os.RemoveAll(dir)
	dst := filepath.Join(dir, version)
	if _, err := p.store.Fetch(ctx, p.cfg.Model, version, dst); err != nil {
		return zero, err
	}
	eng, err := p.f.Load(ctx, version, dst)
	if err != nil {
		return zero, err
	}
	if p.f.Warmup != nil {
		if err := p.f.Warmup(ctx, eng); err != nil {
			p.closeAll([]E{eng})
			return zero, fmt.Errorf("warm up: %w", err)
		}
	}
	return eng, nil
}

// Acquire returns the engine of version and a release func to call once
// when the session (or request) that uses it ends; the engine stays
// resident until then. A version that is not resident is loaded first
// (a session pinned to it may arrive from another gateway), if a slot is
// free: otherwise ErrFull.
func (p *Pool[E]) Acquire(ctx context.Context, version string) (E, func(), error) {
	var zero E
	for {
		e, err := p.ensure(ctx, version)
		if err != nil {
			return zero, nil, fmt.Errorf("acquire %s: %w", version, err)
		}
		p.mu.Lock()
		if p.entries[version] != e { // evicted between the load and now
			p.mu.Unlock()
			continue
		}
		e.refs++
		p.notifyLocked()
		p.mu.Unlock()
		var once sync.Once
		return e.engine, func() { once.Do(func() { p.release(version, e) }) }, nil
	}
}

func (p *Pool[E]) release(version string, e *entry[E]) {
	p.mu.Lock()
	e.refs--
	victims := p.evictLocked()
	p.notifyLocked()
	p.mu.Unlock()
	p.closeAll(victims)
}

// evictLocked removes the loaded engines that no session holds and neither
// the served nor the wanted state names, and returns them to be closed.
func (p *Pool[E]) evictLocked() []E {
	keep := append(targets(p.serving), targets(p.wanted)...)
	var out []E
	for v, e := range p.entries {
		select {
		case <-e.ready:
		default:
			continue // loading
		}
		if e.refs == 0 && !slices.Contains(keep, v) {
			delete(p.entries, v)
			out = append(out, e.engine)
			p.log.Info("model version released", "version", v)
		}
	}
	return out
}

func (p *Pool[E]) closeAll(engines []E) {
	if p.f.Close == nil {
		return
	}
	for _, e := range engines {
		if err := p.f.Close(e); err != nil {
			p.log.Warn("close engine", "err", err)
		}
	}
}

func (p *Pool[E]) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Status reports what the pool serves and holds.
func (p *Pool[E]) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := Status{Serving: p.serving, Wanted: p.wanted, Loaded: []string{}, Sessions: map[string]int{}}
	for v, e := range p.entries {
		select {
		case <-e.ready:
			st.Loaded = append(st.Loaded, v)
			st.Sessions[v] = e.refs
		default:
			st.Loading = append(st.Loading, v)
		}
	}
	for v, err := range p.failed {
		if st.Failed == nil {
			st.Failed = map[string]string{}
		}
		st.Failed[v] = err.Error()
	}
	slices.Sort(st.Loaded)
	slices.Sort(st.Loading)
	return st
}

// Wait blocks until cond holds for the pool's Status or ctx is done.
func (p *Pool[E]) Wait(ctx context.Context, cond func(Status) bool) error {
	for {
		ch := p.changedChan()
		if cond(p.Status()) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close closes every engine, in use or not, and makes later calls fail; call
// it after Run has returned and the server has drained.
func (p *Pool[E]) Close() error {
	p.mu.Lock()
	p.closed = true
	var all []E
	for v, e := range p.entries {
		select {
		case <-e.ready:
			if e.err == nil {
				all = append(all, e.engine)
			}
			delete(p.entries, v)
		default:
		}
	}
	p.notifyLocked()
	p.mu.Unlock()
	p.closeAll(all)
	return nil
}

// targets lists the versions a state needs resident: stable, and the
// canary unless it is being rolled back (a paused canary stays loaded so
// that resume is instant).
func targets(s schema.RolloutState) []string {
	var out []string
	if s.Stable != "" {
		out = append(out, s.Stable)
	}
	if c := canaryOf(s); c != "" {
		out = append(out, c)
	}
	return out
}

func canaryOf(s schema.RolloutState) string {
	if s.State == schema.PhaseRollingBack {
		return ""
	}
	return s.Canary
}
