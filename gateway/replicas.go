package gateway

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// replicaWait is what replicated knows of the primary's replicas: how many
// were connected when it last looked (at most once a second), and when it
// last warned that a write went unconfirmed.
type replicaWait struct {
	mu        sync.Mutex
	connected int
	known     bool // connected has been read once
	checked   time.Time
	warned    time.Time
}

// replicated runs write on one Redis connection and, with
// Config.ReplicaAcks, then waits (WAIT) until that many replicas have what
// it wrote, or as many as are connected: after a failover the promoted
// replica has none until another joins, and waiting for one would only
// slow every answer down. A shortfall after ReplicaAckTimeout is logged,
// not returned.
func (s *Server) replicated(ctx context.Context, write func(redis.Cmdable) error) error {
	c, ok := s.rdb.(*redis.Client)
	if s.cfg.ReplicaAcks == 0 || !ok {
		return write(s.rdb)
	}
	conn := c.Conn()
	defer conn.Close()
	if err := write(conn); err != nil {
		return err
	}
	want := s.cfg.ReplicaAcks
	if n, known := s.replicas.count(ctx, conn); known {
		want = min(want, n)
	}
	if want == 0 {
		return nil
	}
	n, err := conn.Wait(ctx, want, s.cfg.ReplicaAckTimeout).Result()
	if err != nil {
		return fmt.Errorf("wait for %d replicas: %w", want, err)
	}
	if n < int64(want) && s.replicas.shouldWarn(time.Now()) {
		s.log.Warn("answered before the Redis replicas confirmed the write; a failover now could lose it",
			"replicas_wanted", want, "replicas_confirmed", n, "timeout", s.cfg.ReplicaAckTimeout)
	}
	return nil
}

var connectedReplicasRE = regexp.MustCompile(`(?m)^connected_slaves:(\d+)`)

// count is the number of replicas connected to the primary c talks to, as
// INFO replication said at most a second ago, and whether it has been read
// yet; when it cannot be read the last known number stands.
func (w *replicaWait) count(ctx context.Context, c redis.Cmdable) (int, bool) {
	w.mu.Lock()
	now := time.Now()
	if !w.checked.IsZero() && now.Sub(w.checked) < time.Second {
		defer w.mu.Unlock()
		return w.connected, w.known
	}
	w.checked = now // the other writes meanwhile use the last number
	w.mu.Unlock()
	info, err := c.Info(ctx, "replication").Result()
	m := connectedReplicasRE.FindStringSubmatch(info)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil && m != nil {
		w.connected, _ = strconv.Atoi(m[1])
		w.known = true
	}
	return w.connected, w.known
}

// shouldWarn reports whether ten seconds have passed since the last warning.
func (w *replicaWait) shouldWarn(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now.Sub(w.warned) < 10*time.Second {
		return false
	}
	w.warned = now
	return true
}
