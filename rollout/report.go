package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ReportKey holds the JSON of a deployment's latest A/B analysis, written by
// its one analysis owner (the learner) and read by every gateway's
// dashboard, so that no gateway replays the sessions topic.
func (c *Client) ReportKey(deployment string) string {
	return c.cfg.Prefix + "abtest:{" + deployment + "}:report"
}

// PublishReport stores v as the deployment's latest analysis.
func (c *Client) PublishReport(ctx context.Context, deployment string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("publish a/b report of %q: %w", deployment, err)
	}
	if err := c.rdb.Set(ctx, c.ReportKey(deployment), raw, 0).Err(); err != nil {
		return fmt.Errorf("publish a/b report of %q: %w", deployment, err)
	}
	return nil
}

// ReadReport decodes the deployment's latest analysis into v, or returns
// ErrNotFound when none has been published.
func (c *Client) ReadReport(ctx context.Context, deployment string, v any) error {
	raw, err := c.rdb.Get(ctx, c.ReportKey(deployment)).Bytes()
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("a/b report of %q: %w", deployment, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("a/b report of %q: %w", deployment, err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("a/b report of %q: %w", deployment, err)
	}
	return nil
}
