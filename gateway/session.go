package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/parleyhq/parley/schema"
)

// session is the state of one conversation, kept in the Redis hash
// {prefix}session:{id}. Any gateway on the same Redis can continue it.
type session struct {
	ID            string
	ClientID      string // the API client that created it; only it may touch it
	PlayerID      string
	NPCID         string
	PolicyVersion string
	Arm           string
	ExperimentID  string
	Salt          string // the experiment's assignment salt
	Generation    int64  // the rollout generation the session was assigned at
	Turns         int
	Ended         schema.EndReason
	History       []schema.Exchange // the latest exchanges, at most Config.MaxHistory
	Client        *schema.ClientMeta
}

// Redis layout of sessions:
//
//	{prefix}session:{{id}}        hash: client, player, npc, policy_version, arm,
//	                              experiment_id, salt, generation, turns, ended,
//	                              history (JSON), client_meta, last_activity,
//	                              turn_token (of the turn saved last)
//	{prefix}session:{{id}}:lock   a turn in progress (SET NX with a token)
//	{prefix}sessions:active       sorted set: session id scored by last activity (unix ms)
//
// The braces around the id are a Redis Cluster hash tag: a session's hash
// and lock share a slot, so every script of a session (lockScript,
// appendScript, endScript) touches one slot. The active set lives in a slot
// of its own and is only ever updated by single-key commands; the session
// hash, not the set, is the truth about whether and when a session ended
// and when it was last active.
//
// Idle sessions are found through the sorted set, not keyspace
// notifications: the sweeper tries every session whose score is older than
// the idle timeout, and endScript ends it if its hash says it is still
// idle. createSession adds a session to the set before it writes the hash,
// so a gateway that dies in between leaves at worst an id without a hash,
// which the sweeper drops. The hash's TTL (idle timeout + ended retention)
// only cleans up after gateways that were all down for that long.
func (s *Server) sessionKey(id string) string { return s.cfg.KeyPrefix + "session:{" + id + "}" }
func (s *Server) lockKey(id string) string    { return s.sessionKey(id) + ":lock" }
func (s *Server) activeKey() string           { return s.cfg.KeyPrefix + "sessions:active" }

func (s *Server) liveTTL() time.Duration { return s.cfg.IdleTimeout + s.cfg.EndedRetention }

// createSession stores a new session and marks it active.
func (s *Server) createSession(ctx context.Context, sess *session) error {
	var meta []byte
	if sess.Client != nil {
		meta, _ = json.Marshal(sess.Client)
	}
	now := s.now()
	// The active set first: a crash before the hash is written leaves an id
	// the sweeper finds without a hash and drops, never a session it misses.
	if err := s.rdb.ZAdd(ctx, s.activeKey(), redis.Z{Score: float64(now.UnixMilli()), Member: sess.ID}).Err(); err != nil {
		return fmt.Errorf("create session %s: %w", sess.ID, err)
	}
	key := s.sessionKey(sess.ID)
	err := s.replicated(ctx, func(c redis.Cmdable) error {
		_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, key,
				"client", sess.ClientID, "player", sess.PlayerID, "npc", sess.NPCID,
				"policy_version", sess.PolicyVersion, "arm", sess.Arm, "experiment_id", sess.ExperimentID,
				"salt", sess.Salt, "generation", sess.Generation, "turns", 0, "ended", "", "history", "[]", "client_meta", string(meta),
				"last_activity", now.UnixMilli())
			p.PExpire(ctx, key, s.liveTTL())
			return nil
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("create session %s: %w", sess.ID, err)
	}
	return nil
}

// loadSession reads a session; ErrNotFound when there is none.
func (s *Server) loadSession(ctx context.Context, id string) (*session, error) {
	if _, err := uuid.Parse(id); err != nil {
		return nil, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	m, err := s.rdb.HGetAll(ctx, s.sessionKey(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("load session %s: %w", id, err)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	return decodeSession(id, m)
}

func decodeSession(id string, m map[string]string) (*session, error) {
	sess := &session{
		ID: id, ClientID: m["client"], PlayerID: m["player"], NPCID: m["npc"],
		PolicyVersion: m["policy_version"], Arm: m["arm"], ExperimentID: m["experiment_id"], Salt: m["salt"],
		Ended: schema.EndReason(m["ended"]),
	}
	var err error
	if sess.Turns, err = strconv.Atoi(m["turns"]); err != nil {
		return nil, fmt.Errorf("decode session %s turns: %w", id, err)
	}
	if g := m["generation"]; g != "" { // sessions stored before generations were logged have none
		if sess.Generation, err = strconv.ParseInt(g, 10, 64); err != nil {
			return nil, fmt.Errorf("decode session %s generation: %w", id, err)
		}
	}
	if sess.History, err = decodeHistory(m["history"]); err != nil {
		return nil, fmt.Errorf("decode session %s history: %w", id, err)
	}
	if cm := m["client_meta"]; cm != "" {
		sess.Client = new(schema.ClientMeta)
		if err := json.Unmarshal([]byte(cm), sess.Client); err != nil {
			return nil, fmt.Errorf("decode session %s client meta: %w", id, err)
		}
	}
	return sess, nil
}

// turnLock is a session's turn lock held by one message.
type turnLock struct {
	s     *Server
	id    string
	token string
	held  bool // false once appendTurn or unlock released it
}

// lockScript loads a session and takes its turn lock, so that one message at
// a time is answered, in one round trip. KEYS: session, lock. ARGV: client
// id, lock token, lock TTL ms, now ms, session TTL ms, and the token of a
// lock this gateway stranded on the session (or ""), which counts as free,
// as does the caller's own token (the script run again after a lost reply).
// It returns {status} or {status, session hash}: "missing", "forbidden"
// (another client's), "ended", "busy" (another turn holds the lock) or
// "locked", in which case the session's last activity and TTL are renewed.
var lockScript = redis.NewScript(`
local h = redis.call('HGETALL', KEYS[1])
if #h == 0 then return {'missing'} end
local f = {}
for i = 1, #h, 2 do f[h[i]] = h[i + 1] end
if f['client'] ~= ARGV[1] then return {'forbidden'} end
if f['ended'] ~= '' then return {'ended', h} end
local held = redis.call('GET', KEYS[2])
if held and held ~= ARGV[2] and held ~= ARGV[6] then return {'busy', h} end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
redis.call('HSET', KEYS[1], 'last_activity', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {'locked', h}`)

// lockSession loads session id for clientID and takes its turn lock. It
// returns ErrNotFound, ErrForbidden or ErrSessionEnded as loading would;
// when another turn holds the lock it returns the session and a nil lock,
// so that the caller can still rank a rate limit before ErrTurnInProgress.
func (s *Server) lockSession(ctx context.Context, id, clientID string) (*session, *turnLock, error) {
	if _, err := uuid.Parse(id); err != nil {
		return nil, nil, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	res, err := lockScript.Run(ctx, s.rdb, []string{s.sessionKey(id), s.lockKey(id)}, clientID, token,
		s.lockTTL().Milliseconds(), s.now().UnixMilli(), s.liveTTL().Milliseconds(), s.stranded.token(id)).Slice()
	if err != nil {
		return nil, nil, fmt.Errorf("lock session %s: %w", id, err)
	}
	status, _ := res[0].(string)
	switch status {
	case "missing":
		return nil, nil, fmt.Errorf("session %s: %w", id, ErrNotFound)
	case "forbidden":
		return nil, nil, fmt.Errorf("%w: session %s belongs to another client", ErrForbidden, id)
	}
	flat, _ := res[1].([]any)
	sess, err := decodeSession(id, flatHash(flat))
	if err != nil {
		return nil, nil, err
	}
	switch status {
	case "ended":
		return nil, nil, fmt.Errorf("session %s ended (%s): %w", id, sess.Ended, ErrSessionEnded)
	case "busy":
		return sess, nil, nil
	}
	s.stranded.forget(id)
	return sess, &turnLock{s: s, id: id, token: token, held: true}, nil
}

// lockTTL bounds how long a turn lock outlives a gateway that died holding it.
func (s *Server) lockTTL() time.Duration { return s.cfg.RequestTimeout + 10*time.Second }

// unlock releases the lock unless appendTurn already did. When Redis cannot
// be reached (it is failing over, say) the lock is remembered as stranded,
// so that the session's next message on this gateway takes it over.
func (l *turnLock) unlock(ctx context.Context) {
	if l == nil || !l.held {
		return
	}
	l.held = false
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := unlockScript.Run(ctx, l.s.rdb, []string{l.s.lockKey(l.id)}, l.token).Err(); err != nil {
		l.s.log.Warn("unlock session", "session_id", l.id, "err", err)
		l.s.stranded.add(l.id, l.token, l.s.now(), l.s.lockTTL())
	}
}

var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// flatHash turns the flat field, value list of HGETALL in a script's reply into a map.
func flatHash(flat []any) map[string]string {
	m := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		m[k] = v
	}
	return m
}

// appendScript records one exchange and releases the turn lock. KEYS:
// session, lock. ARGV: lock token, expected turns before, new history JSON,
// now ms, ttl ms, max turns, ended retention ms. Returns -1 if the session
// ended meanwhile, -2 if another turn got in first, 1 if this turn ended it
// at max turns, else 0. Ending here claims the end as endScript does, in
// the session hash: each refuses a session whose hash says it ended. The
// hash keeps the token of the turn saved last, so that the same script run
// again (go-redis retries a command whose reply was lost) answers as the
// first run did rather than -2.
var appendScript = redis.NewScript(`
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
local f = redis.call('HMGET', KEYS[1], 'turn_token', 'ended')
if f[1] == ARGV[1] then return f[2] == 'max_turns' and 1 or 0 end
if f[2] ~= '' then return -1 end -- ended, or gone (false)
local turns = tonumber(redis.call('HGET', KEYS[1], 'turns'))
if turns ~= tonumber(ARGV[2]) then return -2 end
turns = turns + 1
redis.call('HSET', KEYS[1], 'turns', turns, 'history', ARGV[3], 'last_activity', ARGV[4], 'turn_token', ARGV[1])
if turns >= tonumber(ARGV[6]) then
  redis.call('HSET', KEYS[1], 'ended', 'max_turns')
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
  return 1
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 0`)

// appendTurn adds x to the session's history (keeping the latest
// MaxHistory), releases lock, and reports whether the session thereby
// reached MaxTurns (it then leaves the active set too).
func (s *Server) appendTurn(ctx context.Context, sess *session, lock *turnLock, x schema.Exchange) (ended bool, err error) {
	hist := append(sess.History, x)
	if over := len(hist) - s.cfg.MaxHistory; over > 0 {
		hist = hist[over:]
	}
	hj, err := json.Marshal(hist)
	if err != nil {
		return false, fmt.Errorf("append turn to %s: %w", sess.ID, err)
	}
	var r int
	err = s.replicated(ctx, func(c redis.Cmdable) (err error) {
		r, err = appendScript.Run(ctx, c, []string{s.sessionKey(sess.ID), s.lockKey(sess.ID)},
			lock.token, sess.Turns, hj, s.now().UnixMilli(), s.liveTTL().Milliseconds(), s.cfg.MaxTurns,
			s.cfg.EndedRetention.Milliseconds()).Int()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("append turn to %s: %w", sess.ID, err)
	}
	lock.held = false
	switch r {
	case -1:
		return false, fmt.Errorf("session %s: %w", sess.ID, ErrSessionEnded)
	case -2:
		return false, fmt.Errorf("session %s: %w", sess.ID, ErrTurnInProgress)
	}
	sess.History, sess.Turns = hist, sess.Turns+1
	if r == 1 {
		sess.Ended = schema.EndMaxTurns
		if err := s.rdb.ZRem(ctx, s.activeKey(), sess.ID).Err(); err != nil {
			s.log.Warn("remove a session ended at max turns from the active set; the sweeper will", "session_id", sess.ID, "err", err)
		}
	}
	return r == 1, nil
}

// endScript claims the end of a session in its hash: the caller whose
// script sets the hash's ended field is the one that ends the session and
// emits session_ended, so two gateways never both do. KEYS: session. ARGV:
// latest activity (ms) that still counts as idle (or "+inf"), reason, ended
// retention ms. Returns {"missing"}, {"ended"} (someone ended it before),
// {"active", last activity ms} (the player was active after the cutoff) or
// {"claimed", session hash}.
var endScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
local f = redis.call('HMGET', KEYS[1], 'ended', 'last_activity')
if f[1] and f[1] ~= '' then return {'ended'} end
local last = tonumber(f[2]) or 0
if ARGV[1] ~= '+inf' and last > tonumber(ARGV[1]) then return {'active', tostring(last)} end
redis.call('HSET', KEYS[1], 'ended', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'claimed', redis.call('HGETALL', KEYS[1])}`)

// endSession ends session id with reason if it has not ended (and, for
// idle_timeout, has been idle since cutoff). It returns the ended session,
// or nil when someone else ended it first, it was active after cutoff, or
// its state is gone. The session leaves the active set after its hash
// says it ended; a session still active gets its set score moved up to its
// last activity, so that sweeps skip it until it is idle.
func (s *Server) endSession(ctx context.Context, id string, reason schema.EndReason, cutoff string) (*session, error) {
	res, err := endScript.Run(ctx, s.rdb, []string{s.sessionKey(id)},
		cutoff, string(reason), s.cfg.EndedRetention.Milliseconds()).Slice()
	if err != nil {
		return nil, fmt.Errorf("end session %s: %w", id, err)
	}
	status, _ := res[0].(string)
	if status == "active" {
		last, _ := res[1].(string)
		score, err := strconv.ParseFloat(last, 64)
		if err != nil {
			return nil, fmt.Errorf("end session %s: last activity %q: %w", id, last, err)
		}
		z := redis.ZAddArgs{XX: true, GT: true, Members: []redis.Z{{Score: score, Member: id}}}
		if err := s.rdb.ZAddArgs(ctx, s.activeKey(), z).Err(); err != nil {
			return nil, fmt.Errorf("end session %s: mark active: %w", id, err)
		}
		return nil, nil
	}
	if err := s.rdb.ZRem(ctx, s.activeKey(), id).Err(); err != nil {
		// The hash says it ended; a later sweep finds that and retries.
		s.log.Warn("remove an ended session from the active set; the sweeper will", "session_id", id, "err", err)
	}
	switch status {
	case "missing":
		s.log.Warn("dropped an active session without state (expired, or its gateway died creating it); no session_ended event", "session_id", id)
		return nil, nil
	case "ended":
		return nil, nil
	}
	flat, _ := res[1].([]any)
	return decodeSession(id, flatHash(flat))
}

// Sweep ends every session idle for longer than the idle timeout, emitting
// session_ended with reason idle_timeout, and returns how many it ended.
// Run calls it every SweepInterval; gateways sharing a Redis may sweep at
// the same time, and each session is ended by exactly one of them.
func (s *Server) Sweep(ctx context.Context) (int, error) {
	ctx, span := s.tracer.Start(ctx, "gateway.sweep_idle_sessions")
	defer span.End()
	cutoff := strconv.FormatInt(s.now().Add(-s.cfg.IdleTimeout).UnixMilli(), 10)
	ended := 0
	for {
		ids, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{
			Key: s.activeKey(), Start: "-inf", Stop: cutoff, ByScore: true, Count: 100,
		}).Result()
		if err != nil {
			return ended, fmt.Errorf("sweep idle sessions: %w", err)
		}
		claimed := 0
		for _, id := range ids {
			sess, err := s.endSession(ctx, id, schema.EndIdleTimeout, cutoff)
			if err != nil {
				return ended, err
			}
			if sess == nil {
				continue
			}
			claimed++
			if err := s.publish(ctx, s.endedEvent(sess, schema.EndIdleTimeout)); err != nil {
				s.log.Error("log idle session end", "session_id", id, "err", err)
			}
			s.metrics.sessionsEnded(ctx, schema.EndIdleTimeout)
		}
		ended += claimed
		if len(ids) < 100 || claimed == 0 {
			return ended, nil
		}
	}
}
