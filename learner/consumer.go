package learner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/parleyhq/parley/schema"
)

// ConsumerConfig configures the session consumer.
type ConsumerConfig struct {
	// Brokers are the Kafka bootstrap addresses, host:port.
	Brokers []string `json:"brokers"`
	// Topic is the session topic, schema.SessionsTopic by default.
	Topic string `json:"topic"`
	// GroupID is the consumer group whose offsets the learner commits.
	GroupID string `json:"group_id"`
	// BatchSize is the most records applied between two commits.
	BatchSize int `json:"batch_size"`
	// BatchWait bounds how long a batch waits for more records, and so how
	// often idle sessions are checked when the topic is quiet.
	BatchWait time.Duration `json:"batch_wait"`
	// SessionTimeout closes a session that has had no event for this long,
	// by event time or by wall clock, whether or not it ended.
	SessionTimeout time.Duration `json:"session_timeout"`
	// AbandonReason is the end reason given to a session closed by the
	// timeout without a session_ended event. The default, "error", says
	// the end is unknown: such a dialogue is kept but gets no final
	// [Terminate] turn in user-agent training (DESIGN.md §5).
	AbandonReason schema.EndReason `json:"abandon_reason"`
	// JournalCompactEvents rewrites the open-session journal once it holds
	// this many more events than the open sessions need.
	JournalCompactEvents int `json:"journal_compact_events"`
}

// DefaultConsumerConfig returns the defaults: topic parley.sessions.v1,
// group parley-learner, batches of up to 500 records or 200 ms, sessions
// closed after 30 minutes of silence with reason "error".
func DefaultConsumerConfig() ConsumerConfig {
	return ConsumerConfig{
		Topic:                schema.SessionsTopic,
		GroupID:              "parley-learner",
		BatchSize:            500,
		BatchWait:            200 * time.Millisecond,
		SessionTimeout:       30 * time.Minute,
		AbandonReason:        schema.EndError,
		JournalCompactEvents: 10000,
	}
}

// Validate reports the first bad field.
func (c ConsumerConfig) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("consumer config: no brokers")
	case c.Topic == "" || c.GroupID == "":
		return errors.New("consumer config: topic and group id are required")
	case c.BatchSize < 1:
		return fmt.Errorf("consumer config: batch size %d must be positive", c.BatchSize)
	case c.BatchWait <= 0 || c.SessionTimeout <= 0:
		return fmt.Errorf("consumer config: batch wait %v and session timeout %v must be positive", c.BatchWait, c.SessionTimeout)
	case c.JournalCompactEvents < 1:
		return fmt.Errorf("consumer config: journal compaction threshold %d must be positive", c.JournalCompactEvents)
	}
	switch c.AbandonReason {
	case schema.EndIdleTimeout, schema.EndError:
	default:
		return fmt.Errorf("consumer config: abandon reason %q: want idle_timeout or error", c.AbandonReason)
	}
	return nil
}

// ConsumerStats counts what a consumer has done since it started.
type ConsumerStats struct {
	Records   int // records fetched
	Invalid   int // records that were not valid session events (skipped)
	Applied   int // new events applied
	Duplicate int // events seen before (same event_id)
	Late      int // events of sessions already stored
	Conflict  int // a turn or end repeated under another event_id (for a turn the later event wins, for an end the first)
	Stored    int // dialogues stored
	Expired   int // sessions closed by the timeout
	Commits   int // offset commits
	Committed int // records whose offsets were committed
}

// Consumer reads parley.sessions.v1 in a consumer group, rebuilds whole
// dialogues and stores the ended ones. For every batch it fetches, applies,
// persists (dialogues and the open sessions' new events, fsync'd) and only
// then commits the batch's offsets, so a crash at any point loses nothing;
// what is redelivered is absorbed by event_id and session_id dedupe. On
// start it replays the store's journal to rebuild the sessions that were
// open. It assumes it is the only consumer writing to its store: with
// several learners, each must own its partitions' open sessions.
type Consumer struct {
	cfg    ConsumerConfig
	store  *Store
	logger *slog.Logger
	now    func() time.Time

	mu           sync.Mutex // guards asm, journalCount, stats and lag against Stats
	asm          *assembler
	journalCount int // events in the journal file
	stats        ConsumerStats
	lag          map[int]int64 // by partition, as of its last fetched record

	// beforeCommit, when set (tests), runs after a batch is durable and
	// before its offsets are committed; an error stops Run there.
	beforeCommit func(batch int) error
}

// NewConsumer creates a consumer that stores into store. now is the wall
// clock (nil means time.Now).
func NewConsumer(cfg ConsumerConfig, store *Store, logger *slog.Logger, now func() time.Time) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, errors.New("new consumer: nil store")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	cfg.Brokers = append([]string(nil), cfg.Brokers...)
	return &Consumer{cfg: cfg, store: store, logger: logger, now: now}, nil
}

// Stats returns the counters. It may be called while Run runs.
func (c *Consumer) Stats() ConsumerStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	if c.asm != nil {
		s.Applied, s.Duplicate, s.Late, s.Conflict = c.asm.stats.Applied, c.asm.stats.Duplicate, c.asm.stats.Late, c.asm.stats.Conflict
	}
	return s
}

// PartitionLag returns, by partition, the records not yet fetched as of the
// last record fetched from it (high watermark − offset − 1).
func (c *Consumer) PartitionLag() map[int]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.lag)
}

// Run consumes until ctx is done (then it returns nil) or an error that it
// cannot retry.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.recover(); err != nil {
		return err
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     c.cfg.Brokers,
		GroupID:     c.cfg.GroupID,
		Topic:       c.cfg.Topic,
		MaxWait:     c.cfg.BatchWait,
		StartOffset: kafka.FirstOffset,
		// CommitInterval 0: CommitMessages returns once the broker has the offsets.
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			c.logger.Debug("kafka reader", "msg", fmt.Sprintf(msg, args...))
		}),
	})
	defer r.Close()
	c.logger.Info("session consumer started", "topic", c.cfg.Topic, "group", c.cfg.GroupID,
		"stored", c.store.Len(), "open_sessions", c.openSessions())
	for batch := 0; ; batch++ {
		msgs, err := c.fetch(ctx, r)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("consume %s: %w", c.cfg.Topic, err)
		}
		if err := c.process(msgs); err != nil {
			return fmt.Errorf("consume %s: %w", c.cfg.Topic, err)
		}
		if len(msgs) == 0 {
			continue
		}
		if c.beforeCommit != nil {
			if err := c.beforeCommit(batch); err != nil {
				return err
			}
		}
		if err := r.CommitMessages(ctx, msgs...); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("commit offsets of %s: %w", c.cfg.Topic, err)
		}
		c.mu.Lock()
		c.stats.Commits++
		c.stats.Committed += len(msgs)
		c.mu.Unlock()
	}
}

// recover rebuilds the open sessions from the journal.
func (c *Consumer) recover() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asm = newAssembler(c.store.Has)
	events, err := c.store.Journal()
	if err != nil {
		return fmt.Errorf("recover open sessions: %w", err)
	}
	now := c.now()
	var done []schema.Dialogue
	for _, e := range events {
		if d, _ := c.asm.apply(e, now); d != nil {
			done = append(done, *d)
		}
	}
	c.journalCount = len(events)
	c.asm.stats = assembleStats{}
	if len(done) > 0 {
		// Ended in the journal but not stored: a crash between the two writes.
		n, err := c.store.Append(done)
		if err != nil {
			return fmt.Errorf("recover open sessions: %w", err)
		}
		c.stats.Stored += n
	}
	return c.compact(true)
}

// fetch returns up to BatchSize records, waiting at most BatchWait once the
// first has come (or BatchWait in all when none comes).
func (c *Consumer) fetch(ctx context.Context, r *kafka.Reader) ([]kafka.Message, error) {
	fctx, cancel := context.WithTimeout(ctx, c.cfg.BatchWait)
	defer cancel()
	var msgs []kafka.Message
	for len(msgs) < c.cfg.BatchSize {
		m, err := r.FetchMessage(fctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
				return msgs, nil
			}
			return msgs, err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// process applies a batch, expires idle sessions and makes the result
// durable: stored dialogues first, then the journal.
func (c *Consumer) process(msgs []kafka.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	var done []schema.Dialogue
	var fresh []schema.SessionEvent
	for _, m := range msgs {
		c.stats.Records++
		if c.lag == nil {
			c.lag = map[int]int64{}
		}
		c.lag[m.Partition] = max(m.HighWaterMark-m.Offset-1, 0)
		var e schema.SessionEvent
		if err := json.Unmarshal(m.Value, &e); err != nil {
			c.stats.Invalid++
			c.logger.Warn("skipping a record that is not JSON", "partition", m.Partition, "offset", m.Offset, "err", err)
			continue
		}
		if err := e.Validate(); err != nil {
			c.stats.Invalid++
			c.logger.Warn("skipping an invalid session event", "partition", m.Partition, "offset", m.Offset, "err", err)
			continue
		}
		d, isNew := c.asm.apply(e, now)
		if d != nil {
			done = append(done, *d)
		} else if isNew {
			fresh = append(fresh, e)
		}
	}
	expired := c.asm.expire(now, c.cfg.SessionTimeout, c.cfg.AbandonReason)
	c.stats.Expired += len(expired)
	done = append(done, expired...)
	if len(done) > 0 {
		n, err := c.store.Append(done)
		if err != nil {
			return err
		}
		c.stats.Stored += n
		c.logger.Debug("stored dialogues", "count", n, "expired", len(expired), "open_sessions", len(c.asm.open))
	}
	// Events of sessions that closed in this batch need no journal entry.
	keep := fresh[:0]
	for _, e := range fresh {
		if _, open := c.asm.open[e.SessionID]; open {
			keep = append(keep, e)
		}
	}
	if err := c.store.AppendJournal(keep); err != nil {
		return err
	}
	c.journalCount += len(keep)
	return c.compact(false)
}

// compact rewrites the journal with only the open sessions' events when it
// has grown JournalCompactEvents past them (or always, when force is set
// and it holds anything stale).
func (c *Consumer) compact(force bool) error {
	live := c.asm.pending()
	stale := c.journalCount - len(live)
	if stale <= 0 || (!force && stale < c.cfg.JournalCompactEvents) {
		return nil
	}
	if err := c.store.RewriteJournal(live); err != nil {
		return err
	}
	c.journalCount = len(live)
	return nil
}

// openSessions is the number of sessions not stored yet.
func (c *Consumer) openSessions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.asm == nil { // before Run recovered them
		return 0
	}
	return len(c.asm.open)
}
