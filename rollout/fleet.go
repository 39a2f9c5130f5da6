package rollout

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Instance is what one gateway instance reports in
// {prefix}fleet:{deployment}:{instance}.
type Instance struct {
	Deployment string `json:"deployment"`
	Instance   string `json:"instance"`
	// Generation is the rollout generation the instance has applied.
	Generation int64  `json:"generation"`
	Stable     string `json:"stable"`
	Canary     string `json:"canary,omitempty"`
	// Loaded lists the resident versions; Loading the one being loaded.
	Loaded  []string `json:"loaded"`
	Loading string   `json:"loading,omitempty"`
	// LastError is the last load failure, such as a refused checksum.
	LastError string    `json:"last_error,omitempty"`
	Sessions  int       `json:"sessions"`
	UpdatedAt time.Time `json:"updated_at"`
}

// FleetKey is the hash of one instance. The deployment is a Redis Cluster
// hash tag, so that Fleet finds every instance on one node.
func (c *Client) FleetKey(deployment, instance string) string {
	return c.cfg.Prefix + "fleet:{" + deployment + "}:" + instance
}

// Heartbeat writes in's entry with a TTL of FleetTTL (UpdatedAt is set to now).
func (c *Client) Heartbeat(ctx context.Context, in Instance) error {
	if in.Deployment == "" || in.Instance == "" {
		return fmt.Errorf("heartbeat: deployment and instance are required")
	}
	key := c.FleetKey(in.Deployment, in.Instance)
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, key)
		p.HSet(ctx, key,
			"deployment", in.Deployment,
			"instance", in.Instance,
			"generation", strconv.FormatInt(in.Generation, 10),
			"stable", in.Stable,
			"canary", in.Canary,
			"loaded", strings.Join(in.Loaded, ","),
			"loading", in.Loading,
			"last_error", in.LastError,
			"sessions", strconv.Itoa(in.Sessions),
			"updated_at", time.Now().UTC().Format(time.RFC3339Nano))
		p.PExpire(ctx, key, c.cfg.FleetTTL)
		return nil
	})
	if err != nil {
		return fmt.Errorf("heartbeat %s/%s: %w", in.Deployment, in.Instance, err)
	}
	return nil
}

// RunHeartbeat calls Heartbeat with report() every FleetTTL/3 until ctx is
// done. Failures are logged (Redis may be down) and retried on the next beat.
func (c *Client) RunHeartbeat(ctx context.Context, report func() Instance) error {
	t := time.NewTicker(c.cfg.FleetTTL / 3)
	defer t.Stop()
	for {
		if err := c.Heartbeat(ctx, report()); err != nil && ctx.Err() == nil {
			c.log.Warn("fleet heartbeat", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Leave deletes an instance's entry, for a clean shutdown.
func (c *Client) Leave(ctx context.Context, deployment, instance string) error {
	if err := c.rdb.Del(ctx, c.FleetKey(deployment, instance)).Err(); err != nil {
		return fmt.Errorf("leave fleet %s/%s: %w", deployment, instance, err)
	}
	return nil
}

// Fleet lists the live instances of a deployment, sorted by name.
func (c *Client) Fleet(ctx context.Context, deployment string) ([]Instance, error) {
	pattern := globEscape(c.FleetKey(deployment, "")) + "*"
	node, err := c.nodeOf(ctx, pattern)
	if err != nil {
		return nil, fmt.Errorf("fleet %q: %w", deployment, err)
	}
	var keys []string
	it := node.Scan(ctx, 0, pattern, 256).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("fleet %q: %w", deployment, err)
	}
	var out []Instance
	for _, k := range keys {
		h, err := c.rdb.HGetAll(ctx, k).Result()
		if err != nil {
			return nil, fmt.Errorf("fleet %q: %w", deployment, err)
		}
		// Skip entries that expired since the scan, and those of another
		// deployment whose name extends this one's with a colon.
		if len(h) == 0 || h["deployment"] != deployment {
			continue
		}
		in := Instance{
			Deployment: deployment, Instance: h["instance"], Stable: h["stable"], Canary: h["canary"],
			Loading: h["loading"], LastError: h["last_error"],
		}
		if l := h["loaded"]; l != "" {
			in.Loaded = strings.Split(l, ",")
		}
		in.Generation, _ = strconv.ParseInt(h["generation"], 10, 64)
		in.Sessions, _ = strconv.Atoi(h["sessions"])
		in.UpdatedAt, _ = time.Parse(time.RFC3339Nano, h["updated_at"])
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b Instance) int { return strings.Compare(a.Instance, b.Instance) })
	return out, nil
}

// globEscape escapes the glob metacharacters of a Redis SCAN pattern.
// nodeOf is the client to SCAN for keys in key's hash slot: in a Redis
// Cluster the primary that holds the slot (SCAN reads one node), else c.rdb.
func (c *Client) nodeOf(ctx context.Context, key string) (redis.Cmdable, error) {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return c.rdb, nil
	}
	return cc.MasterForKey(ctx, key)
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
