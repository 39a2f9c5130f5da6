package redisconn

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{Addr: "127.0.0.1:6379"}, true},
		{Config{Addr: "a:26379, b:26379,c:26379", MasterName: "parley"}, true},
		{Config{Addr: "a:7000,b:7001", Cluster: true}, true},
		{Config{}, false},
		{Config{Addr: "nohostport"}, false},
		{Config{Addr: "a:1,b:2"}, false},
		{Config{Addr: "a:1", MasterName: "m", Cluster: true}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok=%v", tc.cfg, err, tc.ok)
		}
	}
}

func TestOpenPicksTheClientKind(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Addr: "127.0.0.1:6379"}, "*redis.Client"},
		{Config{Addr: "127.0.0.1:26379,127.0.0.1:26380", MasterName: "parley"}, "*redis.Client"},
		{Config{Addr: "127.0.0.1:7000", Cluster: true}, "*redis.ClusterClient"},
	} {
		c := tc.cfg.Open()
		var got string
		switch c.(type) {
		case *redis.Client:
			got = "*redis.Client"
		case *redis.ClusterClient:
			got = "*redis.ClusterClient"
		}
		if got != tc.want {
			t.Errorf("%+v: Open() is %T, want %s", tc.cfg, c, tc.want)
		}
		_ = c.Close()
	}
}
