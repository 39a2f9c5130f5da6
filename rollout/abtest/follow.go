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
}

// Validate reports a configuration that cannot consume.
func (c FollowConfig) Validate() error {
	if len(c.Brokers) == 0 || c.Topic == "" {
		return errors.New("abtest follow: brokers and topic are required")
	}
	return nil
}

// Follow feeds every session event of the topic, from its first offset,
// into c until ctx is done. It joins no consumer group and commits nothing:
// each follower keeps its own in-memory Collector and so reads the whole
// topic. Records that are not valid session events are logged and skipped:
// they cannot belong to an experiment.
func Follow(ctx context.Context, cfg FollowConfig, c *Collector, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	parts, err := partitions(ctx, cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(parts))
	for _, p := range parts {
		go func() { errs <- followPartition(ctx, cfg, p, c, log) }()
	}
	var first error
	for range parts {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	return first
}

// partitions waits until the topic exists and returns its partitions.
func partitions(ctx context.Context, cfg FollowConfig) ([]int, error) {
	for {
		var ids []int
		conn, err := (&kafka.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", cfg.Brokers[0])
		if err == nil {
			ps, _ := conn.ReadPartitions(cfg.Topic) // an error leaves none: wait and ask again
			conn.Close()
			for _, p := range ps {
				ids = append(ids, p.ID)
			}
		}
		if len(ids) > 0 {
			return ids, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(time.Second): // not created yet, or the broker is away
		}
	}
}

func followPartition(ctx context.Context, cfg FollowConfig, partition int, c *Collector, log *slog.Logger) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: cfg.Brokers, Topic: cfg.Topic, Partition: partition, MaxWait: 500 * time.Millisecond,
	})
	defer r.Close()
	if err := r.SetOffset(kafka.FirstOffset); err != nil {
		return fmt.Errorf("abtest follow %s/%d: %w", cfg.Topic, partition, err)
	}
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("abtest follow %s/%d: %w", cfg.Topic, partition, err)
		}
		var ev schema.SessionEvent
		if err := json.Unmarshal(m.Value, &ev); err != nil || ev.Validate() != nil {
			log.Warn("abtest: skipping a record that is not a session event", "partition", m.Partition, "offset", m.Offset)
			continue
		}
		c.Add(ev)
	}
}
