package main

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/internal/testenv"
)

func run(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

func TestHelpListsEverySubcommand(t *testing.T) {
	out, err := run(context.Background(), "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dev", "gateway", "learner", "ctl", "bots", "train", "experiment", "bench", "corpus", "version"} {
		if !strings.Contains(out, "\n  "+name+" ") {
			t.Errorf("parley --help does not list %q:\n%s", name, out)
		}
	}
}

func TestInvalidConfigNamesTheField(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"flag", nil, []string{"dev", "--addr", "nowhere"}, "addr"},
		{"env", map[string]string{"PARLEY_ADDR": "nowhere"}, []string{"dev"}, "addr"},
		{"env not a number", map[string]string{"PARLEY_KAFKA_PORT": "many"}, []string{"dev"}, "PARLEY_KAFKA_PORT"},
		{"log level", nil, []string{"dev", "--log-level", "loud", "--data-dir", "x"}, "log level"},
		{"key cache ttl", nil, []string{"gateway", "--kafka-brokers", "k:9092", "--instance", "gw", "--key-cache-ttl", "-1s"}, "key-cache-ttl"},
		{"key cache size", nil, []string{"dev", "--key-cache-size", "0"}, "key-cache-size"},
		{"analysis group", nil, []string{"dev", "--analysis-group", ""}, "analysis-group"},
		{"sse keep-alive env", map[string]string{"PARLEY_SSE_KEEP_ALIVE": "-1s"}, []string{"dev"}, "sse-keep-alive"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			_, err := run(context.Background(), c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("parley %v = %v; want an error naming %q", c.args, err, c.want)
			}
		})
	}
}

func TestDevStartsAndStopsCleanly(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	dataDir := t.TempDir()
	// A registry that already has both agents: the bootstrap is skipped
	// (internal/devstack tests the bootstrap itself).
	testenv.PublishTinyModel(t, filepath.Join(dataDir, "registry"), "npc", "v1")
	testenv.PublishTinyModel(t, filepath.Join(dataDir, "registry"), "user-agent", "v1")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out string
	go func() {
		var err error
		out, err = run(ctx, "dev", "--data-dir", dataDir, "--addr", addr, "--log-level", "warn")
		done <- err
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("parley dev exited early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("parley dev was not ready within 2m")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // let it print the keys
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("parley dev after Ctrl-C = %v; want nil", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("parley dev did not stop within a minute of Ctrl-C")
	}
	for _, line := range []string{"\nplayer_key=pk_", "\nadmin_key=", "dashboard_url=http://" + addr + "/admin/"} {
		if !strings.Contains(out, line) {
			t.Errorf("parley dev output lacks %q:\n%s", line, out)
		}
	}
}
