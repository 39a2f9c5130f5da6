package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
)

// Role is what an API key may do.
type Role string

// The roles of API keys.
const (
	// RolePlayerClient is a game client: the player API on sessions it created.
	RolePlayerClient Role = "player-client"
	// RoleLiveOps may also use the admin API.
	RoleLiveOps Role = "live-ops"
	// RoleAdmin may do everything.
	RoleAdmin Role = "admin"
)

// Valid reports whether r is one of the three roles.
func (r Role) Valid() bool {
	return r == RolePlayerClient || r == RoleLiveOps || r == RoleAdmin
}

// KeyInfo describes one stored API key; the key itself is never stored.
type KeyInfo struct {
	// ID is the hex sha256 of the key: the Redis field and what RevokeKey takes.
	ID        string    `json:"id"`
	ClientID  string    `json:"client_id"`
	Role      Role      `json:"role"`
	CreatedAt time.Time `json:"created_at"`
}

// ErrKeyNotFound is returned by RevokeKey for a key that is not stored.
var ErrKeyNotFound = errors.New("gateway: api key not found")

var clientIDRE = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)

func keysKey(prefix string) string { return prefix + "apikeys" }

func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// CreateKey makes a new random API key for clientID with role, stores its
// sha256 in the {prefix}apikeys hash, and returns the key. The key is shown
// once: only its hash is kept.
func CreateKey(ctx context.Context, rdb redis.UniversalClient, prefix, clientID string, role Role) (string, error) {
	if !clientIDRE.MatchString(clientID) {
		return "", fmt.Errorf("create key: client id %q must be 1-64 characters of A-Z a-z 0-9 . _ @ -", clientID)
	}
	if !role.Valid() {
		return "", fmt.Errorf("create key: role %q is not player-client, live-ops or admin", role)
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("create key: %w", err)
	}
	key := "pk_" + base64.RawURLEncoding.EncodeToString(b)
	info := KeyInfo{ID: hashKey(key), ClientID: clientID, Role: role, CreatedAt: time.Now().UTC()}
	v, err := json.Marshal(info)
	if err != nil {
		return "", fmt.Errorf("create key: %w", err)
	}
	if err := rdb.HSet(ctx, keysKey(prefix), info.ID, v).Err(); err != nil {
		return "", fmt.Errorf("create key for %q: %w", clientID, err)
	}
	return key, nil
}

// RevokeKey deletes a key given either the key itself or its ID (as ListKeys
// shows it). It returns ErrKeyNotFound when there is no such key.
func RevokeKey(ctx context.Context, rdb redis.UniversalClient, prefix, keyOrID string) error {
	id := keyOrID
	if _, err := hex.DecodeString(id); err != nil || len(id) != 64 {
		id = hashKey(keyOrID)
	}
	n, err := rdb.HDel(ctx, keysKey(prefix), id).Result()
	if err != nil {
		return fmt.Errorf("revoke key %s: %w", id[:12], err)
	}
	if n == 0 {
		return fmt.Errorf("revoke key %s: %w", id[:12], ErrKeyNotFound)
	}
	return nil
}

// ListKeys returns every stored key, ordered by client id then creation time.
func ListKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]KeyInfo, error) {
	m, err := rdb.HGetAll(ctx, keysKey(prefix)).Result()
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	out := make([]KeyInfo, 0, len(m))
	for id, v := range m {
		var k KeyInfo
		if err := json.Unmarshal([]byte(v), &k); err != nil {
			return nil, fmt.Errorf("list keys: entry %s: %w", id[:min(12, len(id))], err)
		}
		k.ID = id
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ClientID != out[j].ClientID {
			return out[i].ClientID < out[j].ClientID
		}
		return out[i].CreatedAt.Before(out[j].CreatedAt)
	})
	return out, nil
}

// principal is the authenticated caller of a request.
type principal struct {
	ClientID string
	Role     Role
}

const principalKey = "parley.principal"

// authenticate resolves the bearer key of a request to its principal,
// through the key cache.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header.Get(echo.HeaderAuthorization)
		key, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || key == "" {
			return fmt.Errorf("%w: send Authorization: Bearer <key>", ErrUnauthorized)
		}
		id := hashKey(strings.TrimSpace(key))
		if p, ok := s.keys.get(id, s.now()); ok {
			c.Set(principalKey, p)
			return next(c)
		}
		v, err := s.rdb.HGet(c.Request().Context(), keysKey(s.cfg.KeyPrefix), id).Result()
		if errors.Is(err, redis.Nil) {
			return ErrUnauthorized
		}
		if err != nil {
			return fmt.Errorf("look up api key: %w", err)
		}
		var k KeyInfo
		if err := json.Unmarshal([]byte(v), &k); err != nil || !k.Role.Valid() {
			return fmt.Errorf("decode api key entry: %w", errors.Join(err, ErrUnauthorized))
		}
		p := principal{ClientID: k.ClientID, Role: k.Role}
		s.keys.put(id, p, s.now())
		c.Set(principalKey, p)
		return next(c)
	}
}

// requireRole admits only principals with one of roles.
func requireRole(roles ...Role) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			p := principalOf(c)
			for _, r := range roles {
				if p.Role == r {
					return next(c)
				}
			}
			return fmt.Errorf("%w: role %s may not use this route", ErrForbidden, p.Role)
		}
	}
}

// Caller returns the client id of the API key that authenticated the
// request, or "" when none did (admin.Deps.Caller takes it).
func Caller(c echo.Context) string { return principalOf(c).ClientID }

func principalOf(c echo.Context) principal {
	p, _ := c.Get(principalKey).(principal)
	return p
}
