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

// FollowConfig says which session events a Collector follows.
type FollowConfig struct {
	Brokers []string
	Topic   string
	// GroupID must be unique to the process: every follower reads the whole
	// topic from its start, since each keeps its own in-memory Collector.
	GroupID string
}

// Validate reports a configuration that cannot consume.
func (c FollowConfig) Validate() error {
	if len(c.Brokers) == 0 || c.Topic == "" || c.GroupID == "" {
		return errors.New("abtest follow: brokers, topic and group id are required")
	}
	return nil
}

// Follow feeds every session event of the topic into c until ctx is done.
// Records that are not valid session events are logged and skipped: they
// cannot belong to an experiment.
func Follow(ctx context.Context, cfg FollowConfig, c *Collector, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: cfg.Brokers, Topic: cfg.Topic, GroupID: cfg.GroupID,
		StartOffset: kafka.FirstOffset, MaxWait: 500 * time.Millisecond, CommitInterval: time.Second,
	})
	defer r.Close()
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("abtest follow %s: %w", cfg.Topic, err)
		}
		var ev schema.SessionEvent
		if err := json.Unmarshal(m.Value, &ev); err != nil || ev.Validate() != nil {
			log.Warn("abtest: skipping a record that is not a session event", "partition", m.Partition, "offset", m.Offset)
			continue
		}
		c.Add(ev)
	}
}
