package gateway

import (
	"sync"
	"time"
)

// strandedLocks are the turn locks this gateway took but could not release
// because Redis was out of reach when their turn failed, by session id. The
// session's next message on this gateway takes such a lock over rather than
// answering 409 turn_in_progress until it expires (after a Sentinel
// failover the promoted replica still holds it). On another gateway the
// message waits for the lock's TTL as before. An entry lives as long as its
// lock's TTL, so the map holds at most the turns that failed within one TTL.
type strandedLocks struct {
	mu sync.Mutex
	m  map[string]strandedLock
}

type strandedLock struct {
	token   string
	expires time.Time
}

// add remembers the lock token of session id for ttl from now, and drops
// the entries that have expired.
func (l *strandedLocks) add(id, token string, now time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]strandedLock{}
	}
	for k, v := range l.m {
		if now.After(v.expires) {
			delete(l.m, k)
		}
	}
	l.m[id] = strandedLock{token: token, expires: now.Add(ttl)}
}

// token is the stranded lock token of session id, or "".
func (l *strandedLocks) token(id string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[id].token
}

// forget drops session id's entry once a message holds its lock again.
func (l *strandedLocks) forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, id)
}
