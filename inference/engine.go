package inference

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"
)

var (
	// ErrQueueFull is returned by Generate when the engine's queue is full;
	// callers should shed load (HTTP 429 with Retry-After).
	ErrQueueFull = errors.New("inference: queue full")
	// ErrClosed is returned once the engine is closed or has stopped running.
	ErrClosed = errors.New("inference: engine closed")
)

// Finish reasons of a Result.
const (
	FinishStop      = "stop"
	FinishLength    = "length"
	FinishCancelled = "cancelled"
	FinishError     = "error"
)

// EngineConfig sizes an Engine.
type EngineConfig struct {
	// MaxBatch is the most sequences decoded together.
	MaxBatch int `json:"max_batch"`
	// QueueSize bounds the requests waiting for a batch slot; beyond it
	// Generate returns ErrQueueFull.
	QueueSize int `json:"queue_size"`
	// MaxSeq caps prompt plus generated tokens; 0 means the model's MaxSeq.
	MaxSeq int `json:"max_seq,omitempty"`
	// ScoreBatch is the most sequences Score runs in one forward pass.
	ScoreBatch int `json:"score_batch"`
	// PrefillBatch is the most new prompts prefilled in one forward pass;
	// larger groups are faster per token but stall running decodes longer.
	// 0 means 8.
	PrefillBatch int `json:"prefill_batch"`
	// PrefixCacheMB is the memory the CPU decoder keeps finished
	// sequences' keys and values in, so that a prompt starting with one
	// (a conversation's next turn) is prefilled only past it; 0 keeps
	// none. The GoMLX decoder always prefills whole prompts.
	PrefixCacheMB int `json:"prefix_cache_mb"`
	// Decoder is the numeric path of prefill and decode steps: DecoderCPU
	// (plain Go, fastest on CPUs), DecoderGoMLX (the model's GoMLX backend,
	// for accelerators) or "" to choose by the model's backend: CPU for
	// the pure-Go backend, GoMLX otherwise.
	Decoder string `json:"decoder,omitempty"`
	// Meter receives the engine's metrics; nil disables them.
	Meter metric.Meter `json:"-"`
	// ModelVersion, when set, labels the engine's metrics (model_version).
	ModelVersion string `json:"-"`
	// Chat is the served model's chat format (LoadChatFormat), which gives
	// the default stop tokens and the reply text; nil is Parley's layout on
	// the engine's tokenizer.
	Chat *ChatFormat `json:"-"`
}

// DefaultEngineConfig suits a 2-core server with the default model.
func DefaultEngineConfig() EngineConfig {
	return EngineConfig{MaxBatch: 32, QueueSize: 256, ScoreBatch: 16, PrefillBatch: 8, PrefixCacheMB: 64}
}

// Validate reports a configuration the engine cannot run with.
func (c EngineConfig) Validate() error {
	switch {
	case c.MaxBatch < 1:
		return fmt.Errorf("engine config: max batch %d must be positive", c.MaxBatch)
	case c.QueueSize < 0:
		return fmt.Errorf("engine config: queue size %d is negative", c.QueueSize)
	case c.MaxSeq < 0:
		return fmt.Errorf("engine config: max seq %d is negative", c.MaxSeq)
	case c.ScoreBatch < 1:
		return fmt.Errorf("engine config: score batch %d must be positive", c.ScoreBatch)
	case c.PrefillBatch < 0:
		return fmt.Errorf("engine config: prefill batch %d is negative", c.PrefillBatch)
	case c.PrefixCacheMB < 0:
		return fmt.Errorf("engine config: prefix cache %d MB is negative", c.PrefixCacheMB)
	case c.Decoder != "" && c.Decoder != DecoderCPU && c.Decoder != DecoderGoMLX:
		return fmt.Errorf("engine config: decoder %q: want %q, %q or empty", c.Decoder, DecoderCPU, DecoderGoMLX)
	}
	return nil
}

// Token is one generated token and the text it completes (empty while a
// multi-byte character is still incomplete).
type Token struct {
	ID   int
	Text string
}

// Result is the outcome of a generation.
type Result struct {
	Tokens           []int
	Text             string
	FinishReason     string // "stop" | "length" | "cancelled" | "error"
	PromptTokens     int
	TimeToFirstToken time.Duration
}

// Stream delivers a generation's tokens as they are sampled, then its
// Result.
type Stream struct {
	tokens chan Token
	done   chan struct{}
	res    Result
	err    error
}

// Tokens returns the channel of generated tokens; it is closed when the
// generation ends. It is buffered for the whole generation, so a caller that
// only wants the Result may ignore it.
func (s *Stream) Tokens() <-chan Token { return s.tokens }

// Wait blocks until the generation ends and returns its Result. The error
// is the request context's error for a cancelled generation, ErrClosed when
// the engine stopped first, or a numeric failure.
func (s *Stream) Wait() (Result, error) {
	<-s.done
	return s.res, s.err
}

// Engine serves one model version: a batching loop (Run) admits queued
// requests into free slots of the running batch at token boundaries,
// prefills them into a KV cache and decodes all active sequences one token
// per step.
type Engine struct {
	m      *Model
	tok    *Tokenizer
	cfg    EngineConfig
	maxSeq int
	log    *slog.Logger
	met    *engineMetrics
	dec    decoder
	chat   *ChatFormat
	// scorer runs Score on the CPU decoder's arithmetic with a cache of
	// its own (nil on the GoMLX decoder); scoreMu serialises its use.
	scorer  *cpuDecoder
	scoreMu sync.Mutex

	mu      sync.RWMutex // guards closed against Generate's send
	closed  bool
	queue   chan *job
	done    chan struct{}
	running atomic.Bool
}

// NewEngine creates an engine for m; call Run to serve.
func NewEngine(m *Model, tok *Tokenizer, cfg EngineConfig, logger *slog.Logger) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, errors.New("new engine: nil tokenizer")
	}
	if tok.VocabSize() > m.cfg.VocabSize {
		return nil, fmt.Errorf("new engine: tokenizer has %d tokens, model only %d", tok.VocabSize(), m.cfg.VocabSize)
	}
	chat := cfg.Chat
	if chat == nil {
		chat = ParleyChatFormat(tok)
	} else if chat.Tokenizer() != tok {
		return nil, errors.New("new engine: the chat format encodes with another tokenizer than the engine's")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PrefillBatch == 0 {
		cfg.PrefillBatch = 8
	}
	maxSeq := m.cfg.MaxSeq
	if cfg.MaxSeq > 0 {
		maxSeq = min(maxSeq, cfg.MaxSeq)
	}
	met, err := newEngineMetrics(cfg.Meter, cfg.ModelVersion, cfg.MaxBatch*maxSeq)
	if err != nil {
		return nil, fmt.Errorf("new engine: metrics: %w", err)
	}
	e := &Engine{
		m: m, tok: tok, cfg: cfg, maxSeq: maxSeq, log: logger, met: met,
		dec:   newDecoder(m, cfg.Decoder, cfg.PrefixCacheMB<<20),
		chat:  chat,
		queue: make(chan *job, cfg.QueueSize),
		done:  make(chan struct{}),
	}
	if _, ok := e.dec.(*cpuDecoder); ok {
		e.scorer = newCPUDecoder(m)
	}
	return e, nil
}

// Decoders of EngineConfig.Decoder.
const (
	DecoderCPU   = "cpu"
	DecoderGoMLX = "gomlx"
)

// newDecoder returns the decoder named by name (see EngineConfig.Decoder),
// keeping up to prefixBytes of finished sequences where it can.
func newDecoder(m *Model, name string, prefixBytes int) decoder {
	if name == "" {
		name = m.DefaultDecoder()
	}
	if name == DecoderCPU {
		d := newCPUDecoder(m)
		d.prefixes = newPrefixStore(prefixBytes)
		return d
	}
	return newGomlxDecoder(m)
}

// DefaultDecoder is the decoder an engine uses for m when its config names
// none: DecoderCPU on the pure-Go backend, which implements every
// architecture, else DecoderGoMLX.
func (m *Model) DefaultDecoder() string {
	if m.bcfg.Name == "" || m.bcfg.Name == "go" {
		return DecoderCPU
	}
	return DecoderGoMLX
}

// Tokenizer returns the tokenizer of the served model.
func (e *Engine) Tokenizer() *Tokenizer { return e.tok }

// Chat returns the chat format of the served model: how to encode its
// prompts (EngineConfig.Chat, or Parley's layout).
func (e *Engine) Chat() *ChatFormat { return e.chat }

// Model returns the served model.
func (e *Engine) Model() *Model { return e.m }

// MaxSeq is the most tokens (prompt plus generation) of one sequence.
func (e *Engine) MaxSeq() int { return e.maxSeq }

// job is a queued request.
type job struct {
	ctx      context.Context
	req      Request
	stream   *Stream
	enqueued time.Time
}

// Generate queues req and returns its Stream. It returns ErrQueueFull when
// the queue is full and ErrClosed after Close. Generations progress while
// Run runs; cancelling ctx ends one at the next token boundary (a few
// milliseconds) and frees its slot. Zero TopP means 1, a nil Stop the chat
// format's (Parley's <|end|>, or a templated model's end-of-turn and eos
// tokens), a zero Seed a random one.
func (e *Engine) Generate(ctx context.Context, req Request) (*Stream, error) {
	if req.Stop == nil {
		req.Stop = e.chat.Stop()
	}
	if req.TopP == 0 {
		req.TopP = 1
	}
	if err := req.validate(e.m.cfg.VocabSize, e.maxSeq); err != nil {
		return nil, err
	}
	if req.Seed == 0 {
		req.Seed = rand.Uint64()
	}
	req.Prompt = slices.Clone(req.Prompt)
	j := &job{
		ctx: ctx, req: req, enqueued: time.Now(),
		stream: &Stream{tokens: make(chan Token, req.MaxTokens), done: make(chan struct{})},
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return nil, ErrClosed
	}
	select {
	case e.queue <- j:
		e.met.queueDepth.Add(1)
		return j.stream, nil
	default:
		return nil, ErrQueueFull
	}
}

// Start runs Run in a goroutine of its own. The returned stop cancels it,
// closes the engine (generations still queued end with ErrClosed) and
// waits for Run to return.
func (e *Engine) Start() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := e.Run(ctx); err != nil {
			e.log.Error("engine stopped", "err", err)
		}
	})
	return func() {
		cancel()
		_ = e.Close()
		wg.Wait()
	}
}

// Close stops the engine: Run returns, queued and running generations end
// with ErrClosed, and later calls fail with ErrClosed.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.done)
	e.mu.Unlock()
	if !e.running.Load() {
		e.drain()
	}
	e.met.close()
	return nil
}

// drain fails every queued job with ErrClosed.
func (e *Engine) drain() {
	for {
		select {
		case j := <-e.queue:
			e.met.queueDepth.Add(-1)
			e.endJob(j, Result{FinishReason: FinishCancelled, PromptTokens: len(j.req.Prompt)}, ErrClosed)
		default:
			return
		}
	}
}

// slot is a sequence in the running batch.
type slot struct {
	job     *job
	samp    *sampler
	pos     int // next cache position to write
	last    int // last sampled token, fed at pos by the next step
	out     []int
	bytes   []byte // decoded output so far
	emitted int    // bytes of output already sent as Token.Text
	ttft    time.Duration
}

// Run is the batching loop. It returns nil when ctx is done or the engine is
// closed, after ending every running and queued generation with ErrClosed.
// Only one Run may be active at a time.
func (e *Engine) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("inference: engine already running")
	}
	defer e.running.Store(false)
	var slots []*slot
	defer func() {
		for _, s := range slots {
			if s != nil {
				e.finish(s, FinishCancelled, ErrClosed)
			}
		}
		e.drain()
		e.dec.close()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.done:
			return nil
		default:
		}
		active, kvTokens := 0, 0
		for i, s := range slots {
			if s == nil {
				continue
			}
			if err := s.job.ctx.Err(); err != nil {
				e.finish(s, FinishCancelled, err)
				slots[i] = nil
				continue
			}
			active++
			kvTokens += s.pos
		}
		e.met.load(active, kvTokens)
		var pending []*job
		if active == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-e.done:
				return nil
			case j := <-e.queue:
				e.met.queueDepth.Add(-1)
				pending = append(pending, j)
			}
		}
	admit:
		for active+len(pending) < e.cfg.MaxBatch {
			select {
			case j := <-e.queue:
				e.met.queueDepth.Add(-1)
				pending = append(pending, j)
			default:
				break admit
			}
		}
		pending = slices.DeleteFunc(pending, func(j *job) bool {
			if err := j.ctx.Err(); err != nil {
				e.endJob(j, Result{FinishReason: FinishCancelled, PromptTokens: len(j.req.Prompt)}, err)
				return true
			}
			return false
		})
		var err error
		if slots, err = e.layout(slots, pending); err != nil {
			e.log.Error("kv cache layout failed", "err", err)
			for i, s := range slots {
				if s != nil {
					e.finish(s, FinishError, err)
					slots[i] = nil
				}
			}
			for _, j := range pending {
				e.endJob(j, Result{FinishReason: FinishError, PromptTokens: len(j.req.Prompt)}, err)
			}
			continue
		}
		e.prefill(slots, pending)
		if err := e.step(slots); err != nil {
			e.log.Error("decode step failed", "err", err)
			for i, s := range slots {
				if s != nil {
					e.finish(s, FinishError, err)
					slots[i] = nil
				}
			}
		}
	}
}

// prefill puts the pending jobs into free rows of slots, prefilling them in
// groups of at most PrefillBatch prompts, and samples their first tokens.
func (e *Engine) prefill(slots []*slot, pending []*job) {
	for len(pending) > 0 {
		n := min(len(pending), e.cfg.PrefillBatch)
		group := pending[:n]
		pending = pending[n:]
		rows := make([]int, n)
		prompts := make([][]int, n)
		news := make([]*slot, n)
		for i, j := range group {
			rows[i] = slices.Index(slots, nil)
			prompts[i] = j.req.Prompt
			news[i] = &slot{job: j, samp: newSampler(j.req, j.req.Seed), pos: len(j.req.Prompt)}
			slots[rows[i]] = news[i]
		}
		logits, reused, err := e.dec.prefill(rows, prompts)
		if err != nil {
			e.log.Error("prefill failed", "err", err)
		}
		e.met.reused(reused)
		v := e.m.cfg.VocabSize
		for i, s := range news {
			if err != nil {
				e.finish(s, FinishError, err)
				slots[rows[i]] = nil
				continue
			}
			e.met.prefilled(len(s.job.req.Prompt))
			if e.accept(s, s.samp.sample(logits[i*v:(i+1)*v])) {
				e.keep(rows[i], s)
				slots[rows[i]] = nil
			}
		}
	}
}

// step decodes one token for every active slot and frees the slots that
// finish.
func (e *Engine) step(slots []*slot) error {
	toks := make([]int32, len(slots))
	pos := make([]int32, len(slots))
	active := make([]bool, len(slots))
	n := 0
	for i, s := range slots {
		if s != nil {
			toks[i], pos[i], active[i] = int32(s.last), int32(s.pos), true
			n++
		}
	}
	if n == 0 {
		return nil
	}
	start := time.Now()
	logits, err := e.dec.step(toks, pos, active)
	if err != nil {
		return err
	}
	e.met.step(n, time.Since(start))
	v := e.m.cfg.VocabSize
	for i, s := range slots {
		if s == nil {
			continue
		}
		s.pos++
		if e.accept(s, s.samp.sample(logits[i*v:(i+1)*v])) {
			e.keep(i, s)
			slots[i] = nil
		}
	}
	return nil
}

// keep offers the decoder the positions of row that the finished s wrote:
// its prompt and the tokens fed after it.
func (e *Engine) keep(row int, s *slot) {
	toks := make([]int, 0, s.pos)
	toks = append(toks, s.job.req.Prompt...)
	toks = append(toks, s.out...)
	e.dec.keep(row, toks[:s.pos])
}

// layout makes the decoder's cache fit the active slots plus pending jobs:
// rows are the batch rounded up to a power of two (at most MaxBatch), the
// length the longest sequence's next position rounded up, so that small
// batches and short sequences do not pay for a full-size cache. Active slots
// are compacted to the first rows when the cache is re-laid out.
func (e *Engine) layout(slots []*slot, pending []*job) ([]*slot, error) {
	active := 0
	need := 1
	for _, s := range slots {
		if s != nil {
			active++
			need = max(need, s.pos+1)
		}
	}
	for _, j := range pending {
		p := len(j.req.Prompt)
		need = max(need, padBucket(p, e.maxSeq), p+1)
	}
	n := active + len(pending)
	if n == 0 {
		return slots, nil
	}
	rows := bucketPow2(n, 1, e.cfg.MaxBatch)
	length := bucketPow2(need, 64, e.maxSeq)
	curRows, curLen := e.dec.dims()
	if slots != nil && rows == curRows && length == curLen {
		return slots, nil
	}
	next := make([]*slot, rows)
	src := make([]int, rows)
	k := 0
	for i, s := range slots {
		if s != nil {
			next[k], src[k] = s, i
			k++
		}
	}
	for ; k < rows; k++ {
		src[k] = -1
	}
	if err := e.dec.resize(src, rows, length); err != nil {
		return slots, err
	}
	return next, nil
}

// bucketPow2 rounds n up to floor·2^k, capped at ceil.
func bucketPow2(n, floor, ceil int) int {
	b := floor
	for b < n {
		b *= 2
	}
	return min(b, ceil)
}

// accept records a sampled token for s, streams it and reports whether the
// generation ended (in which case s has been finished).
func (e *Engine) accept(s *slot, id int) bool {
	if len(s.out) == 0 {
		s.ttft = time.Since(s.job.enqueued)
		e.met.firstToken(s.ttft)
	}
	if slices.Contains(s.job.req.Stop, id) {
		e.finish(s, FinishStop, nil)
		return true
	}
	s.out = append(s.out, id)
	s.last = id
	e.met.generated(1)
	s.bytes = append(s.bytes, e.chat.TokenText(id)...)
	cut := completeUTF8(s.bytes, s.emitted)
	s.job.stream.tokens <- Token{ID: id, Text: string(s.bytes[s.emitted:cut])}
	s.emitted = cut
	switch {
	case len(s.out) >= s.job.req.MaxTokens:
		e.finish(s, FinishLength, nil)
		return true
	case s.pos+1 >= e.maxSeq: // prompt plus output fill the context
		e.finish(s, FinishLength, nil)
		return true
	}
	return false
}

// completeUTF8 returns the end of the longest prefix of b (from from) that
// does not stop inside a multi-byte character.
func completeUTF8(b []byte, from int) int {
	for j := len(b) - 1; j >= from && j >= len(b)-utf8.UTFMax; j-- {
		if utf8.RuneStart(b[j]) {
			if !utf8.FullRune(b[j:]) {
				return j
			}
			break
		}
	}
	return len(b)
}

func (e *Engine) finish(s *slot, reason string, err error) {
	e.endJob(s.job, Result{
		Tokens:           s.out,
		Text:             e.chat.Decode(s.out),
		FinishReason:     reason,
		PromptTokens:     len(s.job.req.Prompt),
		TimeToFirstToken: s.ttft,
	}, err)
}

func (e *Engine) endJob(j *job, res Result, err error) {
	// Counted before the stream is closed, so a caller that has its result
	// also sees it counted.
	e.met.finished(res.FinishReason)
	j.stream.res, j.stream.err = res, err
	close(j.stream.tokens)
	close(j.stream.done)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		e.log.Info("generation cancelled", "tokens", len(res.Tokens))
	}
}

// Score returns, for each continuation, the log-probability of each of its
// tokens after prompt and the continuation's preceding tokens. Scoring runs
// in the caller's goroutine, batched ScoreBatch sequences at a time. On the
// CPU decoder, continuations that differ only in their last token (the
// user agent's [Continue] and [Terminate]) share one pass.
func (e *Engine) Score(ctx context.Context, prompt []int, continuations [][]int) ([][]float32, error) {
	e.mu.RLock()
	closed := e.closed
	e.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if len(prompt) == 0 {
		return nil, errors.New("score: empty prompt")
	}
	inVocab := func(ids []int) error {
		for _, id := range ids {
			if id < 0 || id >= e.m.cfg.VocabSize {
				return fmt.Errorf("score: token id %d outside vocabulary of %d", id, e.m.cfg.VocabSize)
			}
		}
		return nil
	}
	if err := inVocab(prompt); err != nil {
		return nil, err
	}
	for _, c := range continuations {
		if len(c) > 0 && len(prompt)+len(c) > e.maxSeq {
			return nil, fmt.Errorf("score: %d tokens exceed %d: %w", len(prompt)+len(c), e.maxSeq, ErrTooLong)
		}
		if err := inVocab(c); err != nil {
			return nil, err
		}
	}
	var out [][]float32
	var err error
	if e.scorer != nil {
		out, err = e.scoreCPU(ctx, prompt, continuations)
	} else {
		out, err = e.scoreGoMLX(ctx, prompt, continuations)
	}
	if err != nil {
		return nil, fmt.Errorf("score: %w", err)
	}
	return out, nil
}

// scoreGoMLX scores whole sequences with the model's log-prob graph.
func (e *Engine) scoreGoMLX(ctx context.Context, prompt []int, continuations [][]int) ([][]float32, error) {
	out := make([][]float32, len(continuations))
	var seqs [][]int
	var which []int
	flush := func() error {
		if len(seqs) == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		lps, err := e.m.SequenceLogProbs(seqs)
		if err != nil {
			return err
		}
		for k, i := range which {
			out[i] = lps[k][len(prompt)-1:]
		}
		seqs, which = seqs[:0], which[:0]
		return nil
	}
	for i, c := range continuations {
		out[i] = []float32{}
		if len(c) == 0 {
			continue
		}
		seqs, which = append(seqs, slices.Concat(prompt, c)), append(which, i)
		if len(seqs) == e.cfg.ScoreBatch {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// scoreCPU runs prompt + c[:len(c)-1] once per distinct such sequence, up
// to ScoreBatch sequences per pass, and reads each continuation token's
// log-probability from the logits before it.
func (e *Engine) scoreCPU(ctx context.Context, prompt []int, continuations [][]int) ([][]float32, error) {
	out := make([][]float32, len(continuations))
	type run struct {
		seq   []int
		conts []int // indices of the continuations it scores
	}
	var runs []*run
	byKey := map[string]*run{}
	for i, c := range continuations {
		out[i] = []float32{}
		if len(c) == 0 {
			continue
		}
		key := fmt.Sprint(c[:len(c)-1])
		r, ok := byKey[key]
		if !ok {
			r = &run{seq: slices.Concat(prompt, c[:len(c)-1])}
			byKey[key] = r
			runs = append(runs, r)
		}
		r.conts = append(r.conts, i)
	}
	e.scoreMu.Lock()
	defer e.scoreMu.Unlock()
	defer e.scorer.close() // its helper goroutines and cache live for one call
	V := e.m.cfg.VocabSize
	from := len(prompt) - 1
	for lo := 0; lo < len(runs); lo += e.cfg.ScoreBatch {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		chunk := runs[lo:min(lo+e.cfg.ScoreBatch, len(runs))]
		seqs := make([][]int, len(chunk))
		for k, r := range chunk {
			seqs[k] = r.seq
		}
		logits, err := e.scorer.logitsFrom(seqs, from)
		if err != nil {
			return nil, err
		}
		for k, r := range chunk {
			rows := logits[k]
			for _, i := range r.conts {
				lp := make([]float32, len(continuations[i]))
				for t, id := range continuations[i] {
					lp[t] = logSoftmaxOf(rows[t*V:(t+1)*V], id)
				}
				out[i] = lp
			}
		}
	}
	return out, nil
}
