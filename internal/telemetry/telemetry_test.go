package telemetry

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestMetricsReachPrometheusHandler(t *testing.T) {
	var logs bytes.Buffer
	tel, err := New(context.Background(), DefaultConfig(), &logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })

	c, err := tel.MeterProvider.Meter("test").Int64Counter("parley.test.requests")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3)
	tel.Logger.Info("hello")

	rec := httptest.NewRecorder()
	tel.MetricsHandler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if !strings.Contains(string(body), "parley_test_requests_total{") || !strings.Contains(string(body), "} 3\n") {
		t.Errorf("/metrics lacks parley_test_requests_total 3:\n%s", body)
	}
	if !strings.Contains(logs.String(), "msg=hello") {
		t.Errorf("log = %q; want a text line with msg=hello", logs.String())
	}
}

func TestConfigValidate(t *testing.T) {
	cases := map[string]func(*Config){
		"no service":   func(c *Config) { c.ServiceName = "" },
		"bad endpoint": func(c *Config) { c.OTLPEndpoint = "collector:4318" },
		"bad level":    func(c *Config) { c.LogLevel = "loud" },
		"bad format":   func(c *Config) { c.LogFormat = "xml" },
	}
	for name, mod := range cases {
		cfg := DefaultConfig()
		mod(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: Validate() = nil; want an error", name)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
}
