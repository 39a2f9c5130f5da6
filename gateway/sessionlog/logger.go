// Package sessionlog is the gateway's Kafka session logger: it writes every
// [schema.SessionEvent] to the sessions topic, keyed by session id, with the
// trace context in the record headers, and never loses one.
//
// The design is a write-ahead spool. [Logger.Publish] appends the event to a
// local spool of segment files and returns once it is on disk (fsync'd, or
// within [Config.CommitWindow] of it);
// [Logger.Run] drains the spool to Kafka in order, deleting a segment only
// after Kafka acknowledged every record in it. An unreachable broker, a
// gateway restart or a crash therefore delays events but loses none, and each
// session's events reach its partition in the order they were published.
// Delivery is at least once: after a failure some events may be written
// twice, and consumers dedupe on event_id.
package sessionlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"

	"github.com/parleyhq/parley/internal/otelkafka"
	"github.com/parleyhq/parley/schema"
)

// Errors Publish returns that callers branch on.
var (
	// ErrSpoolFull means the spool holds SpoolMaxBytes of undelivered
	// events: Kafka has been unreachable for long. The event was not kept.
	ErrSpoolFull = errors.New("sessionlog: spool full")
	// ErrClosed means the Logger was closed.
	ErrClosed = errors.New("sessionlog: closed")
	// ErrEventTooLarge means the encoded event exceeds the 1 MiB record limit.
	ErrEventTooLarge = errors.New("sessionlog: event too large")
)

// Logger publishes session events through the spool to Kafka. Publish is
// safe for concurrent use; run one Run at a time.
type Logger struct {
	cfg    Config
	log    *slog.Logger
	prop   propagation.TextMapPropagator
	spool  *spool
	writer *kafka.Writer
	m      instruments

	wake chan struct{}
	stop chan struct{}

	pubMu  sync.RWMutex // held shared by Publish, exclusively by Close
	closed bool

	drainMu  sync.Mutex // held by whoever drains: Run, or Close's flush
	failing  bool       // the last write failed; guarded by drainMu
	lastWarn time.Time  // of the last failed-write warning; guarded by drainMu
}

// failureWarnEvery is how often a write that keeps failing is logged at
// Warn; attempts in between log at Debug.
const failureWarnEvery = 30 * time.Second

// New opens (or creates) the spool in cfg.SpoolDir, recovering what a
// previous process left there, and prepares the Kafka writer. Nothing is
// sent until Run. A nil logger discards logs, a nil meter records nothing
// and a nil propagator writes W3C trace context and baggage.
func New(cfg Config, logger *slog.Logger, meter metric.Meter, prop propagation.TextMapPropagator) (*Logger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Brokers = append([]string(nil), cfg.Brokers...)
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if meter == nil {
		meter = noop.NewMeterProvider().Meter("")
	}
	if prop == nil {
		prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	logger = logger.With("component", "sessionlog", "topic", cfg.Topic)

	sp, rec, err := openSpool(cfg.SpoolDir, cfg.SegmentBytes, cfg.SpoolMaxBytes, cfg.CommitWindow, logger)
	if err != nil {
		return nil, fmt.Errorf("sessionlog: %w", err)
	}
	l := &Logger{
		cfg:   cfg,
		log:   logger,
		prop:  prop,
		spool: sp,
		wake:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		writer: &kafka.Writer{
			Addr:                   kafka.TCP(cfg.Brokers...),
			Topic:                  cfg.Topic,
			Balancer:               &kafka.Hash{},
			RequiredAcks:           kafka.RequireAll,
			AllowAutoTopicCreation: cfg.AllowAutoTopicCreation,
			// Run retries with its own backoff, and each partition's share of
			// a batch must go in one produce request: a second request could
			// succeed after the first failed and reorder a session.
			MaxAttempts:  1,
			BatchSize:    cfg.BatchMaxEvents,
			BatchBytes:   2*cfg.BatchMaxBytes + 2*maxRecordBytes,
			BatchTimeout: time.Millisecond,
			WriteTimeout: cfg.WriteTimeout,
			ReadTimeout:  cfg.WriteTimeout,
		},
	}
	if l.m, err = newInstruments(meter, sp); err != nil {
		_ = sp.close()
		return nil, fmt.Errorf("sessionlog: metrics: %w", err)
	}
	if rec.truncatedBytes > 0 {
		l.m.truncated.Add(context.Background(), rec.truncatedBytes)
	}
	if rec.events > 0 {
		logger.Info("spool holds events from a previous run; Run delivers them",
			"events", rec.events, "bytes", rec.bytes, "dir", cfg.SpoolDir)
	}
	return l, nil
}

// Publish validates ev and returns once it is in the spool, from where Run
// delivers it: fsync'd, or with a CommitWindow written to the spool's file
// and fsync'd within the window. The trace context of ctx goes into the
// record's headers. It fails with ErrSpoolFull when the spool is full,
// ErrClosed after Close, and ErrEventTooLarge for an oversized event; the
// event is then not kept. A failed fsync is returned too, though the event
// may still be sent; with a CommitWindow, a failed background fsync fails
// every Publish until one succeeds.
func (l *Logger) Publish(ctx context.Context, ev schema.SessionEvent) error {
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	value, err := appendEvent(make([]byte, 0, 512), &ev)
	if err != nil {
		return fmt.Errorf("publish event %s: %w", ev.EventID, err)
	}
	msg := kafka.Message{Key: []byte(ev.SessionID), Value: value}
	otelkafka.Inject(ctx, l.prop, &msg)
	rec := appendRecord(nil, record{appended: time.Now(), key: msg.Key, value: msg.Value, headers: msg.Headers})
	if len(rec)-recordHeaderSize > maxRecordBytes {
		return fmt.Errorf("publish event %s of %d bytes: %w", ev.EventID, len(rec), ErrEventTooLarge)
	}

	l.pubMu.RLock()
	defer l.pubMu.RUnlock()
	if l.closed {
		return fmt.Errorf("publish event %s: %w", ev.EventID, ErrClosed)
	}
	if err := l.spool.append(rec); err != nil {
		if errors.Is(err, ErrSpoolFull) {
			l.m.spoolFull.Add(ctx, 1)
		}
		return fmt.Errorf("publish event %s: %w", ev.EventID, err)
	}
	l.m.published.Add(ctx, 1)
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return nil
}

// Backlog returns the events and bytes in the spool that Kafka has not yet
// acknowledged, for readiness checks and dashboards.
func (l *Logger) Backlog() (events int, bytes int64) {
	return l.spool.backlog()
}

// Run delivers the spool to Kafka until ctx is done or Close is called,
// starting with what a previous process left. A write that fails is retried
// with backoff for as long as it takes; events meanwhile wait in the spool.
// It returns nil when stopped and ErrClosed if the Logger is already closed.
func (l *Logger) Run(ctx context.Context) error {
	l.drainMu.Lock()
	defer l.drainMu.Unlock()
	select {
	case <-l.stop:
		return ErrClosed
	default:
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		sent, err := l.drainOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil:
			l.log.Error("spool read or cleanup failed; retrying", "err", err)
			if !sleep(ctx, l.cfg.RetryBackoffMax) {
				return nil
			}
		case sent == drainedAll:
			// The spool was read to its end: let the events published
			// meanwhile gather into one batch, not one produce request for
			// every few events.
			if !sleep(ctx, l.cfg.Linger) {
				return nil
			}
		case sent == drainedNothing:
			select {
			case <-l.wake:
			case <-ctx.Done():
				return nil
			}
			if !sleep(ctx, l.cfg.Linger) {
				return nil
			}
		}
	}
}

// drained says what one drainOnce delivered.
type drained int

const (
	drainedNothing drained = iota // the spool held nothing to deliver
	drainedSome                   // a full batch, or up to a segment's end: more may wait
	drainedAll                    // everything the spool held when it was read
)

// Close stops Publish and Run, tries for up to CloseTimeout to deliver the
// backlog, and leaves whatever is left in the spool for the next Logger on
// the same directory. It returns errors closing the writer or the spool, not
// an undelivered backlog, which is logged.
func (l *Logger) Close() error {
	l.pubMu.Lock()
	if l.closed {
		l.pubMu.Unlock()
		return nil
	}
	l.closed = true
	l.pubMu.Unlock()
	close(l.stop)

	l.drainMu.Lock()
	defer l.drainMu.Unlock()
	if l.cfg.CloseTimeout > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.CloseTimeout)
		for ctx.Err() == nil {
			sent, err := l.drainOnce(ctx)
			if err != nil || sent == drainedNothing {
				break
			}
		}
		cancel()
	}
	if events, bytes := l.spool.backlog(); events > 0 {
		l.log.Warn("closing with undelivered events; they stay in the spool for the next start",
			"events", events, "bytes", bytes, "dir", l.cfg.SpoolDir)
	}
	err := errors.Join(l.writer.Close(), l.spool.close(), l.m.registration.Unregister())
	if err != nil {
		return fmt.Errorf("sessionlog: close: %w", err)
	}
	return nil
}

// drainOnce delivers one batch from the spool, retrying until Kafka
// acknowledges it or ctx is done. It reports what it delivered.
func (l *Logger) drainOnce(ctx context.Context) (drained, error) {
	b, err := l.spool.readBatch(l.cfg.BatchMaxEvents, l.cfg.BatchMaxBytes)
	if err != nil {
		return drainedNothing, err
	}
	if len(b.recs) == 0 {
		if b.sealedEnd {
			return drainedSome, l.spool.commit(b)
		}
		return drainedNothing, nil
	}
	if err := l.deliver(ctx, b); err != nil {
		return drainedNothing, err
	}
	now := time.Now()
	for _, r := range b.recs {
		l.m.latency.Record(ctx, now.Sub(r.appended).Seconds())
	}
	l.m.delivered.Add(ctx, int64(len(b.recs)))
	sent := drainedAll
	if b.sealedEnd || b.n >= l.cfg.BatchMaxEvents || b.bytes >= l.cfg.BatchMaxBytes {
		sent = drainedSome
	}
	return sent, l.spool.commit(b)
}

// deliver writes b's records until every one is acknowledged. After a
// partial failure only the failed records are written again; kafka-go fails
// a partition's share of a batch as a whole, so the order within a
// partition holds.
func (l *Logger) deliver(ctx context.Context, b batch) error {
	pending := make([]kafka.Message, len(b.recs))
	for i, r := range b.recs {
		pending[i] = r.message()
	}
	for attempt := 0; ; attempt++ {
		wctx, cancel := context.WithTimeout(ctx, l.cfg.WriteTimeout)
		err := l.writer.WriteMessages(wctx, pending...)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		l.m.sendErrors.Add(ctx, 1)
		var werrs kafka.WriteErrors
		if errors.As(err, &werrs) && len(werrs) == len(pending) {
			failed := pending[:0]
			for i, m := range pending {
				if werrs[i] != nil {
					failed = append(failed, m)
				}
			}
			pending = failed
		}
		events, bytes := l.spool.backlog()
		if !l.failing || time.Since(l.lastWarn) >= failureWarnEvery {
			l.failing, l.lastWarn = true, time.Now()
			l.log.Warn("kafka write failed; events wait in the spool and are retried",
				"err", err, "attempt", attempt+1, "backlog_events", events, "backlog_bytes", bytes)
		} else {
			l.log.Debug("kafka write failed again", "err", err, "attempt", attempt+1, "backlog_events", events)
		}
		if len(pending) == 0 {
			break
		}
		if !sleep(ctx, l.backoff(attempt)) {
			return ctx.Err()
		}
	}
	if l.failing {
		l.failing = false
		events, _ := l.spool.backlog()
		l.log.Info("kafka writes succeed again; draining the spool", "backlog_events", events)
	}
	return nil
}

// backoff doubles from RetryBackoffMin to RetryBackoffMax, with jitter.
func (l *Logger) backoff(attempt int) time.Duration {
	d := l.cfg.RetryBackoffMin << min(attempt, 30)
	if d <= 0 || d > l.cfg.RetryBackoffMax {
		d = l.cfg.RetryBackoffMax
	}
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
