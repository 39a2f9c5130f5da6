// Package redisconn opens the Redis client of a Parley process: one server,
// a primary watched by Redis Sentinel, or a Redis Cluster, all behind
// go-redis' UniversalClient so that a failover is followed without a restart.
package redisconn

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Config says which Redis to use.
type Config struct {
	// Addr is host:port, or a comma-separated list of them: the sentinels
	// when MasterName is set, the cluster's seed nodes when Cluster is set.
	Addr string
	// MasterName is the name under which the sentinels at Addr watch the
	// primary; empty means no Sentinel.
	MasterName string
	// Cluster talks to a Redis Cluster through the seed nodes at Addr.
	Cluster bool
}

// Addrs is Addr split at commas, blanks dropped.
func (c Config) Addrs() []string {
	var addrs []string
	for a := range strings.SplitSeq(c.Addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// Validate reports the first field that is unusable.
func (c Config) Validate() error {
	addrs := c.Addrs()
	if len(addrs) == 0 {
		return errors.New("redis: redis-addr is required")
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("redis: address %q is not host:port: %w", a, err)
		}
	}
	if c.MasterName != "" && c.Cluster {
		return errors.New("redis: redis-master-name (Sentinel) and redis-cluster exclude each other")
	}
	if len(addrs) > 1 && c.MasterName == "" && !c.Cluster {
		return fmt.Errorf("redis: %d addresses need redis-master-name (Sentinel) or redis-cluster", len(addrs))
	}
	return nil
}

// Open returns the client c describes: a Sentinel-backed failover client
// when MasterName is set, a cluster client when Cluster is set, else a plain
// client. It does not dial; the first command does.
func (c Config) Open() redis.UniversalClient {
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: c.Addrs(), MasterName: c.MasterName, IsClusterMode: c.Cluster,
	})
}

// String names the Redis for logs and errors.
func (c Config) String() string {
	switch {
	case c.MasterName != "":
		return fmt.Sprintf("sentinel master %q via %s", c.MasterName, c.Addr)
	case c.Cluster:
		return "cluster via " + c.Addr
	}
	return c.Addr
}
