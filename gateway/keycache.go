package gateway

import (
	"sync"
	"time"
)

// keyCache keeps resolved API keys for Config.KeyCacheTTL, so that a request
// costs no Redis round trip for its key; a revoked key therefore stops
// working within that TTL. Only keys that exist are kept (a flood of wrong
// keys cannot fill it), and at most Config.KeyCacheSize of them: when full,
// expired entries go first and then arbitrary ones.
type keyCache struct {
	ttl time.Duration
	max int

	mu      sync.Mutex
	entries map[string]cachedKey // by key id (hex sha256 of the key)
}

type cachedKey struct {
	p       principal
	expires time.Time
}

func newKeyCache(ttl time.Duration, maxEntries int) *keyCache {
	return &keyCache{ttl: ttl, max: maxEntries, entries: make(map[string]cachedKey)}
}

// get returns the principal of key id if it was resolved less than the TTL before now.
func (c *keyCache) get(id string, now time.Time) (principal, bool) {
	if c.ttl <= 0 {
		return principal{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[id]
	if !ok || !now.Before(e.expires) {
		return principal{}, false
	}
	return e.p, true
}

// put keeps p as the principal of key id until now + TTL.
func (c *keyCache) put(id string, p principal, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[id]; !ok && len(c.entries) >= c.max {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		for k := range c.entries {
			if len(c.entries) < c.max {
				break
			}
			delete(c.entries, k)
		}
	}
	c.entries[id] = cachedKey{p: p, expires: now.Add(c.ttl)}
}
