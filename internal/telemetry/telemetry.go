// Package telemetry sets up Parley's observability: an OpenTelemetry tracer
// and meter provider (OTLP over HTTP when an endpoint is configured, a
// Prometheus exporter for /metrics always) and a log/slog logger.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Config says where telemetry goes.
type Config struct {
	// ServiceName names this process in traces and metrics.
	ServiceName string
	// OTLPEndpoint, when set, is the base URL of an OTLP/HTTP collector
	// (for example http://otel-collector:4318); traces and metrics go there too.
	OTLPEndpoint string
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// LogFormat is text or json.
	LogFormat string
}

// DefaultConfig logs text at info level and exports nothing but /metrics.
func DefaultConfig() Config {
	return Config{ServiceName: "parley", LogLevel: "info", LogFormat: "text"}
}

// Validate reports the first field that is out of range.
func (c Config) Validate() error {
	if c.ServiceName == "" {
		return errors.New("telemetry: service name is required")
	}
	if c.OTLPEndpoint != "" {
		u, err := url.Parse(c.OTLPEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("telemetry: otlp endpoint %q must be an http(s) URL", c.OTLPEndpoint)
		}
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("telemetry: log format %q is not text or json", c.LogFormat)
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("telemetry: log level %q is not debug, info, warn or error", s)
	}
	return l, nil
}

// Telemetry holds the providers of one process. Pass its fields to the
// components; call Shutdown before the process exits to flush exports.
type Telemetry struct {
	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Propagator     propagation.TextMapPropagator
	// MetricsHandler serves the Prometheus exposition of every metric.
	MetricsHandler http.Handler

	shutdown []func(context.Context) error
}

// New builds the providers and a logger writing to logOut.
func New(ctx context.Context, cfg Config, logOut io.Writer) (*Telemetry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	level, _ := parseLevel(cfg.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(logOut, opts)
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(logOut, opts)
	}

	res, err := resource.Merge(resource.Default(),
		resource.NewSchemaless(semconv.ServiceName(cfg.ServiceName)))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}

	reg := promclient.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	promExp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("telemetry prometheus exporter: %w", err)
	}
	meterOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(promExp)}
	traceOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if cfg.OTLPEndpoint != "" {
		tExp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(cfg.OTLPEndpoint+"/v1/traces"))
		if err != nil {
			return nil, fmt.Errorf("telemetry otlp traces: %w", err)
		}
		mExp, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(cfg.OTLPEndpoint+"/v1/metrics"))
		if err != nil {
			return nil, fmt.Errorf("telemetry otlp metrics: %w", err)
		}
		traceOpts = append(traceOpts, sdktrace.WithBatcher(tExp))
		meterOpts = append(meterOpts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mExp)))
	}
	tp := sdktrace.NewTracerProvider(traceOpts...)
	mp := sdkmetric.NewMeterProvider(meterOpts...)
	return &Telemetry{
		Logger:         slog.New(h).With("service", cfg.ServiceName),
		TracerProvider: tp,
		MeterProvider:  mp,
		Propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		MetricsHandler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		shutdown:       []func(context.Context) error{tp.Shutdown, mp.Shutdown},
	}, nil
}

// Shutdown flushes and stops the exporters.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}
