package gateway

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// takeScript takes one token from every bucket in KEYS or from none.
// ARGV: now (ms), ttl (ms), then rate (tokens/ms, in plain decimal: the Lua
// of miniredis reads no exponents) and burst of each key.
// A bucket is a hash {tokens, ts}; a missing one is full. It returns 0 when
// the tokens were taken, or else the milliseconds until they would be.
var takeScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local wait = 0
local levels = {}
local stamps = {}
for i, key in ipairs(KEYS) do
  local rate = tonumber(ARGV[1 + 2 * i])
  local burst = tonumber(ARGV[2 + 2 * i])
  local b = redis.call('HMGET', key, 'tokens', 'ts')
  local tokens = tonumber(b[1]) or burst
  local ts = tonumber(b[2]) or now
  if now > ts then
    tokens = math.min(burst, tokens + (now - ts) * rate)
    ts = now
  end
  levels[i] = tokens
  stamps[i] = ts
  if tokens < 1 then
    local w = math.ceil((1 - tokens) / rate)
    if w > wait then wait = w end
  end
end
if wait > 0 then return wait end
for i, key in ipairs(KEYS) do
  redis.call('HSET', key, 'tokens', tostring(levels[i] - 1), 'ts', tostring(stamps[i]))
  redis.call('PEXPIRE', key, ttl)
end
return 0
`)

// bucket is one token bucket to take from.
type bucket struct {
	key   string
	rate  float64 // tokens per second; 0 means unlimited
	burst int
}

// take takes a token from each bucket, all or none. It returns a retryError
// wrapping ErrRateLimited when a bucket is empty.
func (s *Server) take(ctx context.Context, buckets ...bucket) error {
	keys, args := s.takeArgs(buckets)
	if len(keys) == 0 {
		return nil
	}
	return takeResult(takeScript.Run(ctx, s.rdb, keys, args...))
}

// takeArgs builds takeScript's keys and arguments; no keys when every
// bucket is unlimited.
func (s *Server) takeArgs(buckets []bucket) (keys []string, args []any) {
	args = []any{s.now().UnixMilli(), 0}
	var longest time.Duration
	for _, b := range buckets {
		if b.rate <= 0 {
			continue
		}
		keys = append(keys, b.key)
		args = append(args, strconv.FormatFloat(b.rate/1000, 'f', -1, 64), b.burst)
		if d := time.Duration(float64(b.burst) / b.rate * float64(time.Second)); d > longest {
			longest = d
		}
	}
	args[1] = (longest + time.Minute).Milliseconds()
	return keys, args
}

// takeResult turns takeScript's reply into take's error.
func takeResult(cmd *redis.Cmd) error {
	wait, err := cmd.Int64()
	if err != nil {
		return fmt.Errorf("rate limit: %w", err)
	}
	if wait > 0 {
		return &retryError{err: fmt.Errorf("%w: slow down", ErrRateLimited), after: time.Duration(wait) * time.Millisecond}
	}
	return nil
}

// buckets are the token buckets of a request: the client's and, when
// playerID is set, that player's. Their keys share the hash tag {clientID},
// so takeScript touches one Redis Cluster slot.
func (s *Server) buckets(clientID, playerID string) []bucket {
	key := s.cfg.KeyPrefix + "ratelimit:{" + clientID + "}"
	bs := []bucket{{key: key, rate: s.cfg.ClientRate, burst: s.cfg.ClientBurst}}
	if playerID != "" {
		bs = append(bs, bucket{key: key + ":" + playerID, rate: s.cfg.PlayerRate, burst: s.cfg.PlayerBurst})
	}
	return bs
}

// limited reports whether any rate limit is on: with none, a request
// builds no bucket keys.
func (s *Server) limited() bool { return s.cfg.ClientRate > 0 || s.cfg.PlayerRate > 0 }

// limit takes a request's tokens from the client's bucket and, when
// playerID is set, from that player's bucket.
func (s *Server) limit(ctx context.Context, clientID, playerID string) error {
	if !s.limited() {
		return nil
	}
	return s.take(ctx, s.buckets(clientID, playerID)...)
}

// limitTurn takes a message's tokens and, when the message holds the turn
// lock, marks the session active (so the sweeper leaves it alone while its
// reply is generated), in one round trip (a pipeline when it holds both).
// ZADD XX leaves a session the sweeper has just ended out of the set;
// appendTurn then finds it ended.
func (s *Server) limitTurn(ctx context.Context, sess *session, locked bool) error {
	var keys []string
	var args []any
	if s.limited() {
		keys, args = s.takeArgs(s.buckets(sess.ClientID, sess.PlayerID))
	}
	switch {
	case len(keys) == 0 && !locked:
		return nil
	case len(keys) == 0:
		// The ZADD alone: the round trip a pipeline of it would take, without the pipeline.
		if err := s.rdb.ZAddXX(ctx, s.activeKey(), redis.Z{Score: float64(s.now().UnixMilli()), Member: sess.ID}).Err(); err != nil {
			return fmt.Errorf("mark session %s active: %w", sess.ID, err)
		}
		return nil
	}
	var take *redis.Cmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if len(keys) > 0 {
			// EVAL, not EVALSHA: a pipeline cannot fall back on NOSCRIPT.
			take = takeScript.Eval(ctx, p, keys, args...)
		}
		if locked {
			p.ZAddXX(ctx, s.activeKey(), redis.Z{Score: float64(s.now().UnixMilli()), Member: sess.ID})
		}
		return nil
	})
	if take != nil {
		if err := takeResult(take); err != nil {
			return err
		}
	}
	if err != nil {
		return fmt.Errorf("mark session %s active: %w", sess.ID, err)
	}
	return nil
}
