package bench

import (
	"bytes"
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

// countingSink is an EventSink that counts the events it is given.
type countingSink struct{ n atomic.Int64 }

func (s *countingSink) Publish(context.Context, schema.SessionEvent) error {
	s.n.Add(1)
	return nil
}

// startTinyEngine runs the real engine over a tiny random model until the
// test ends.
func startTinyEngine(t *testing.T) *inference.Engine {
	t.Helper()
	tok, err := inference.TrainTokenizer([]string{
		"Welcome back, traveller! The inn has warm bread and cold ale tonight.",
		"I have not seen the dragon since the winter. Ask the guard at the gate.",
	}, 320)
	if err != nil {
		t.Fatal(err)
	}
	m, err := inference.NewModel(testenv.TinyModelConfig(tok.VocabSize()), inference.DefaultBackendConfig(), 7)
	if err != nil {
		t.Fatal(err)
	}
	e, err := inference.NewEngine(m, tok, inference.DefaultEngineConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Start())
	return e
}

// TestRunGateway runs a very short bench to check that it measures every
// point; `parley bench gateway` runs the real one.
func TestRunGateway(t *testing.T) {
	r := testenv.StartRedis(t)
	cfg := DefaultGatewayConfig()
	cfg.Redis = r.Client
	cfg.Engine = gateway.FromEngine(startTinyEngine(t))
	events := &countingSink{}
	cfg.Events = events
	var brokerReads atomic.Int64 // a broker whose CPU grows 1 ms a read
	cfg.BrokerCPU = func() time.Duration { return time.Duration(brokerReads.Add(1)) * time.Millisecond }
	cfg.Concurrency = []int{1, 4}
	cfg.Duration = 300 * time.Millisecond
	cfg.Gateway.Sampling.MaxTokens = 8
	var out bytes.Buffer
	rep, err := RunGateway(context.Background(), cfg, &out)
	if err != nil {
		t.Fatalf("RunGateway: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	// Per concurrency: bare, stub, stub with logging, model.
	if len(rep.Points) != 8 || len(rep.Logging) != 2 || len(rep.Concurrency) != 2 {
		t.Fatalf("got %d points, %d logging ratios and %d concurrency rows; want 8, 2 and 2",
			len(rep.Points), len(rep.Logging), len(rep.Concurrency))
	}
	for i, c := range rep.Concurrency {
		if c.Sessions != cfg.Concurrency[i] || c.BareRPS <= 0 || c.GatewayRPS <= 0 || c.GatewayRPSLogging <= 0 ||
			c.LoggingCost != 1-c.GatewayRPSLogging/c.GatewayRPS {
			t.Errorf("concurrency row %+v: want %d sessions, every rate and the logging cost", c, cfg.Concurrency[i])
		}
		if c.LoggingCostCPU == 0 || c.LoggingCostCPUWithBroker <= c.LoggingCostCPU {
			t.Errorf("concurrency row %+v: want logging's cost by CPU, higher with the broker's CPU", c)
		}
	}
	for _, p := range rep.Points {
		if p.Requests == 0 || p.Errors != 0 || p.P99MS < p.P50MS || p.CPUMSPerRequest <= 0 || p.BrokerCPUMSPerRequest <= 0 {
			t.Errorf("point %+v: want requests, no errors, p99 ≥ p50 and the CPU they and the broker took", p)
		}
	}
	if events.n.Load() == 0 {
		t.Error("the logging-on points published no events")
	}
	keys, _ := r.Client.Keys(context.Background(), "parley-bench-*").Result()
	if len(keys) != 0 {
		t.Errorf("bench left %d keys in Redis", len(keys))
	}
}

// TestProcCPU reads this process's CPU time from /proc as getrusage tells it.
func TestProcCPU(t *testing.T) {
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
	}
	got, want := procCPU(os.Getpid()), processCPU()
	if got <= 0 || got > want || want-got > 100*time.Millisecond {
		t.Errorf("procCPU = %v, getrusage = %v; want it above 0, at most getrusage's and within 100 ms of it", got, want)
	}
}
