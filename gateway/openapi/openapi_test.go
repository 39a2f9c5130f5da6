package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/gateway/admin"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

var update = flag.Bool("update", false, "rewrite gateway/openapi.json")

// file is the description kept in the repository and served by the gateway.
const file = "../openapi.json"

func TestDocumentIsFresh(t *testing.T) {
	want, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(file, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v; run `make schemas` to generate it", err)
	}
	if !bytes.Equal(got, want) {
		t.Error("gateway/openapi.json is stale; run `make schemas`")
	}
}

// discard is an EventSink for a server that serves no request.
type discard struct{}

func (discard) Publish(context.Context, schema.SessionEvent) error { return nil }

// TestDocumentMatchesRoutes holds the description to the router: every
// route of the gateway with the admin API registered is described, and
// every described operation is a route.
func TestDocumentMatchesRoutes(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	srv, err := gateway.New(gateway.DefaultConfig(), gateway.Deps{Redis: rdb, Events: discard{}})
	if err != nil {
		t.Fatal(err)
	}
	// Register only records the handlers; none is called.
	new(admin.API).Register(srv.Admin())
	param := regexp.MustCompile(`:([A-Za-z0-9_]+)`)
	var routes []string
	for _, r := range srv.Routes() {
		if strings.HasSuffix(r.Path, "/*") || r.Method == "echo_route_any" {
			continue // echo's not-found catch-alls
		}
		routes = append(routes, r.Method+" "+param.ReplaceAllString(r.Path, "{$1}"))
	}

	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var described []string
	for path, ops := range doc.Paths {
		for method := range ops {
			described = append(described, strings.ToUpper(method)+" "+path)
		}
	}
	for _, r := range routes {
		if !slices.Contains(described, r) {
			t.Errorf("route %s is missing from gateway/openapi.json", r)
		}
	}
	for _, d := range described {
		if !slices.Contains(routes, d) {
			t.Errorf("gateway/openapi.json describes %s, which the gateway does not route", d)
		}
	}
	if len(routes) < 20 {
		t.Errorf("found %d routes; want the gateway's and the admin API's (at least 20)", len(routes))
	}
}

// TestDocumentLints runs Redocly's OpenAPI linter (npm @redocly/cli,
// installed by .ci/run) over the description, offline: no error and no
// warning of its recommended rules.
func TestDocumentLints(t *testing.T) {
	pkg := testenv.NPMPackage(t, "@redocly/cli")
	abs, err := filepath.Abs(file)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(pkg, "..", "..", ".bin", "redocly"), "lint", "--format", "stylish", abs)
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true")
	out, err := cmd.CombinedOutput()
	t.Logf("redocly lint:\n%s", out)
	if err != nil {
		t.Fatalf("redocly lint: %v", err)
	}
	if regexp.MustCompile(`You have \d+ warnings?`).Match(out) {
		t.Errorf("redocly lint warns; want a clean description")
	}
}
