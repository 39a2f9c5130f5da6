package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/parleyhq/parley/schema"
)

// Client calls the admin API, as `parley ctl` does.
type Client struct {
	// BaseURL is the root of the admin API, such as
	// "http://gateway:8080/admin/v1".
	BaseURL string
	// APIKey is a live-ops or admin key, sent as a bearer token.
	APIKey string
	// Deployment and Model, when set, are sent as ?deployment= and ?model=;
	// empty: the gateway's own.
	Deployment string
	Model      string
	// HTTP is the client to use; nil: one with a 30 s timeout.
	HTTP *http.Client
}

// APIError is an error response of the admin API.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("admin api: %d %s: %s", e.Status, e.Code, e.Message)
}

// Rollout returns the rollout state, fleet and recent history.
func (c *Client) Rollout(ctx context.Context) (RolloutStatus, error) {
	var out RolloutStatus
	return out, c.do(ctx, http.MethodGet, "/rollout", nil, nil, &out)
}

// Canary starts or ramps a canary (a version at a weight, or through
// steps); req.Generation, when not nil, makes it a compare-and-set.
func (c *Client) Canary(ctx context.Context, req schema.CanaryRequest) (schema.RolloutChange, error) {
	var out schema.RolloutChange
	return out, c.do(ctx, http.MethodPost, "/rollout/canary", nil, req, &out)
}

// Advance moves a stepped canary to its next step, by hand.
func (c *Client) Advance(ctx context.Context, req ChangeRequest) (schema.RolloutChange, error) {
	return c.change(ctx, "advance", req)
}

// Promote makes the canary stable.
func (c *Client) Promote(ctx context.Context, req ChangeRequest) (schema.RolloutChange, error) {
	return c.change(ctx, "promote", req)
}

// Rollback sends new sessions back to stable.
func (c *Client) Rollback(ctx context.Context, req ChangeRequest) (schema.RolloutChange, error) {
	return c.change(ctx, "rollback", req)
}

// Pause stops new sessions from joining the canary.
func (c *Client) Pause(ctx context.Context, req ChangeRequest) (schema.RolloutChange, error) {
	return c.change(ctx, "pause", req)
}

// Resume lets new sessions join the canary again.
func (c *Client) Resume(ctx context.Context, req ChangeRequest) (schema.RolloutChange, error) {
	return c.change(ctx, "resume", req)
}

func (c *Client) change(ctx context.Context, action string, req ChangeRequest) (schema.RolloutChange, error) {
	var out schema.RolloutChange
	return out, c.do(ctx, http.MethodPost, "/rollout/"+action, nil, req, &out)
}

// Models lists the registry's versions of the model.
func (c *Client) Models(ctx context.Context) (ModelList, error) {
	var out ModelList
	return out, c.do(ctx, http.MethodGet, "/models", nil, nil, &out)
}

// Manifest returns the manifest of one version.
func (c *Client) Manifest(ctx context.Context, version string) (schema.Manifest, error) {
	var out schema.Manifest
	return out, c.do(ctx, http.MethodGet, "/models/"+url.PathEscape(version), nil, nil, &out)
}

// Curves returns the training curves of one version.
func (c *Client) Curves(ctx context.Context, version string) (schema.Curves, error) {
	var out schema.Curves
	return out, c.do(ctx, http.MethodGet, "/models/"+url.PathEscape(version)+"/curves", nil, nil, &out)
}

// Diff compares the metrics of versions a and b.
func (c *Client) Diff(ctx context.Context, a, b string) (ModelDiff, error) {
	var out ModelDiff
	return out, c.do(ctx, http.MethodGet, "/models/diff", url.Values{"a": {a}, "b": {b}}, nil, &out)
}

// Report returns the A/B analysis the learner last published ("": whichever
// experiment it is of; else it must be of experimentID).
func (c *Client) Report(ctx context.Context, experimentID string) (ExperimentReport, error) {
	var out ExperimentReport
	return out, c.do(ctx, http.MethodGet, "/report", experimentQuery(experimentID), nil, &out)
}

// Timeline returns each arm's Avg.L over time ("": the current experiment).
func (c *Client) Timeline(ctx context.Context, experimentID string) (Timeline, error) {
	var out Timeline
	return out, c.do(ctx, http.MethodGet, "/timeline", experimentQuery(experimentID), nil, &out)
}

func experimentQuery(id string) url.Values {
	if id == "" {
		return nil
	}
	return url.Values{"experiment": {id}}
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	if q == nil {
		q = url.Values{}
	}
	if c.Deployment != "" {
		q.Set("deployment", c.Deployment)
	}
	if c.Model != "" {
		q.Set("model", c.Model)
	}
	u := strings.TrimRight(c.BaseURL, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read response: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var eb schema.ErrorBody
		if json.Unmarshal(raw, &eb) != nil || eb.Error.Code == "" {
			eb.Error = schema.ErrorDetail{Code: schema.ErrorCode(resp.StatusCode), Message: strings.TrimSpace(string(raw))}
		}
		return &APIError{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", method, path, err)
	}
	return nil
}
