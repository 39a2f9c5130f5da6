// Package testenv starts the real servers Parley's tests run against: a
// redis-server on a free loopback port (or the one named by REDIS_ADDR) and a
// Kafka-protocol broker (kfake) on loopback. Each test gets random key and
// topic prefixes, and everything is cleaned up when the test ends.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/parleyhq/parley/internal/broker"
)

// RandomPrefix returns a short random string for keys and topics of one test.
func RandomPrefix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Redis is a Redis server for one test: its address, a client, and the key
// prefix the test's components must use.
type Redis struct {
	Addr   string
	Client *redis.Client
	// Prefix is unique to the test, such as "parley-t1a2b3c4:".
	Prefix string

	t    testing.TB
	port int
	dir  string
	cmd  *exec.Cmd
}

// StartRedis starts a redis-server on a free loopback port, or uses the server
// at REDIS_ADDR when that is set (then Stop and Start are not available).
// Keys under the test's prefix are deleted when the test ends.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	r := &Redis{t: t, Prefix: "parley-" + RandomPrefix() + ":"}
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		r.Addr = addr
	} else {
		if _, err := exec.LookPath("redis-server"); err != nil {
			t.Fatalf("redis-server is not installed (apt-get install -y redis-server) and REDIS_ADDR is not set")
		}
		r.port = FreePort(t)
		r.dir = t.TempDir()
		r.Addr = "127.0.0.1:" + strconv.Itoa(r.port)
		r.Start()
	}
	r.Client = redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if r.cmd != nil {
			r.Stop()
		} else if keys, err := r.Client.Keys(ctx, r.Prefix+"*").Result(); err == nil && len(keys) > 0 {
			r.Client.Del(ctx, keys...)
		}
		_ = r.Client.Close()
	})
	return r
}

// Start (re)starts the server on its port and waits until it answers PING.
func (r *Redis) Start() {
	r.t.Helper()
	if r.dir == "" {
		r.t.Fatal("testenv: cannot start the external Redis at REDIS_ADDR")
	}
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--logfile", filepath.Join(r.dir, "redis.log"))
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			r.t.Fatalf("redis-server on %s did not answer within 10s:\n%s", r.Addr, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (its data is lost: it keeps none on disk).
func (r *Redis) Stop() {
	r.t.Helper()
	if r.cmd == nil {
		r.t.Fatal("testenv: cannot stop the external Redis at REDIS_ADDR")
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// Kafka is a Kafka-protocol broker (kfake) on loopback for one test.
type Kafka struct {
	// Addrs are the bootstrap addresses, host:port.
	Addrs []string
	// Prefix is unique to the test; use Topic to name topics.
	Prefix string

	t       testing.TB
	port    int
	dataDir string
	cluster *kfake.Cluster
}

// StartKafka starts a single-broker kfake cluster on a free loopback port
// that creates topics on first use. Its log lives in a temp dir, so Stop and
// Start keep every record and committed offset, like a broker restart.
func StartKafka(t testing.TB) *Kafka {
	t.Helper()
	k := &Kafka{t: t, Prefix: RandomPrefix() + ".", port: FreePort(t), dataDir: t.TempDir()}
	k.Start()
	t.Cleanup(func() {
		if k.cluster != nil {
			k.cluster.Close()
		}
	})
	return k
}

// Topic returns name with the test's prefix.
func (k *Kafka) Topic(name string) string { return k.Prefix + name }

// Start (re)starts the broker on its port with its data.
func (k *Kafka) Start() {
	k.t.Helper()
	c, err := broker.New(k.port, k.dataDir)
	if err != nil {
		k.t.Fatal(err)
	}
	k.cluster = c
	k.Addrs = c.ListenAddrs()
}

// Stop closes the broker, keeping its data for the next Start.
func (k *Kafka) Stop() {
	k.cluster.Close()
	k.cluster = nil
}

// WaitReady polls url until it answers 200, failing the test if done
// delivers first (the server exited) or 90 seconds pass.
func WaitReady(t testing.TB, url string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("server exited before %s was ready: %v", url, err)
		default:
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s not ready within 90s", url)
}

// Serve runs a server (run, on a context of ctx) until the test ends and
// waits until readyURL answers 200. At cleanup it cancels run's context and
// fails the test unless run returned nil; a server that exits early fails
// the wait.
func Serve(ctx context.Context, t testing.TB, readyURL string, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	errc, exited := make(chan error, 1), make(chan struct{})
	var runErr error
	go func() {
		runErr = run(ctx)
		close(exited)
		errc <- runErr
	}()
	t.Cleanup(func() {
		cancel()
		<-exited
		if runErr != nil {
			t.Errorf("server of %s after shutdown = %v; want nil", readyURL, runErr)
		}
	})
	WaitReady(t, readyURL, errc)
}
