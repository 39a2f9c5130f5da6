package abtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/parleyhq/parley/schema"
)

// FollowConfig says which session events a Collector follows and how its
// progress is kept.
type FollowConfig struct {
	Brokers []string
	Topic   string
	// GroupID is the consumer group whose offsets the follower commits:
	// one analysis owner reads the topic once, and a restart resumes where
	// its last checkpoint left it.
	GroupID string
	// CheckpointEvery is how often the follower checkpoints the collector
	// and then commits the offsets it has folded in.
	CheckpointEvery time.Duration
}

// Validate reports a configuration that cannot consume.
func (c FollowConfig) Validate() error {
	if len(c.Brokers) == 0 || c.Topic == "" || c.GroupID == "" {
		return errors.New("abtest follow: brokers, topic and group id are required")
	}
	if c.CheckpointEvery <= 0 {
		return fmt.Errorf("abtest follow: checkpoint interval %v must be positive", c.CheckpointEvery)
	}
	return nil
}

// Follow feeds the session events of the topic into c until ctx is done,
// reading as consumer group cfg.GroupID (from the first offset when the
// group has none): fetch, fold in, and every CheckpointEvery (and when ctx
// is done) call checkpoint, which must make c's state durable (see
// Collector.Snapshot), then commit the offsets fetched. After a restart the
// owner restores its checkpoint and Follow resumes from the committed
// offsets; the events between the two are folded in again and absorbed by
// their event_id. Records that are not valid session events are logged and
// skipped: they cannot belong to an experiment.
func Follow(ctx context.Context, cfg FollowConfig, c *Collector, checkpoint func() error, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: cfg.Brokers, Topic: cfg.Topic, GroupID: cfg.GroupID,
		StartOffset: kafka.FirstOffset, MaxWait: 500 * time.Millisecond,
	})
	defer r.Close()
	var pending []kafka.Message
	save := func(ctx context.Context) error {
		if err := checkpoint(); err != nil {
			return fmt.Errorf("abtest follow %s: checkpoint: %w", cfg.Topic, err)
		}
		if len(pending) == 0 {
			return nil
		}
		if err := r.CommitMessages(ctx, pending...); err != nil {
			return fmt.Errorf("abtest follow %s: commit: %w", cfg.Topic, err)
		}
		pending = pending[:0]
		return nil
	}
	next := time.Now().Add(cfg.CheckpointEvery)
	for {
		fctx, cancel := context.WithDeadline(ctx, next)
		m, err := r.FetchMessage(fctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			// Keep what was folded in: checkpoint and commit on the way out.
			sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer scancel()
			return save(sctx)
		case errors.Is(err, context.DeadlineExceeded):
		case err != nil:
			return fmt.Errorf("abtest follow %s: %w", cfg.Topic, err)
		default:
			var ev schema.SessionEvent
			if err := json.Unmarshal(m.Value, &ev); err != nil || ev.Validate() != nil {
				log.Warn("abtest: skipping a record that is not a session event", "partition", m.Partition, "offset", m.Offset)
			} else {
				c.Add(ev)
			}
			pending = append(pending, m)
		}
		if !time.Now().Before(next) {
			if err := save(ctx); err != nil && ctx.Err() == nil {
				return err
			}
			next = time.Now().Add(cfg.CheckpointEvery)
		}
	}
}
