package main

import (
	"bytes"
	"context"
	"net/http"
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, "dev", "--data-dir", t.TempDir(), "--addr", addr, "--log-level", "warn")
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
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
			t.Fatal("parley dev did not serve /healthz within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("parley dev after Ctrl-C = %v; want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("parley dev did not stop within 30s of Ctrl-C")
	}
}
