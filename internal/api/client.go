package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/plan"
	"github.com/sluicelb/sluice/internal/replication"
)

// Client calls the API of a running daemon; the CLI uses it. A non-2xx answer is an *Error.
type Client struct {
	// NoWait makes changes return before the datapath applied them (?wait=false).
	NoWait bool
	base   string
	token  string
	http   *http.Client
}

// NewUnixClient talks to the daemon over its unix socket (DefaultSocket).
func NewUnixClient(socketPath string) *Client {
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socketPath)
		},
	}
	return &Client{base: "http://sluice", http: &http.Client{Transport: transport}}
}

// NewTCPClient talks to the daemon's TCP listener at baseURL ("http://10.0.0.5:9090"),
// authenticating with the bearer token.
func NewTCPClient(baseURL, token string) *Client {
	return &Client{base: strings.TrimSuffix(baseURL, "/"), token: token, http: &http.Client{}}
}

// Status describes the daemon.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var out Status
	err := c.call(ctx, http.MethodGet, "/v1/status", nil, &out)
	return out, err
}

// Services lists every service.
func (c *Client) Services(ctx context.Context) ([]engine.ServiceView, error) {
	var out []engine.ServiceView
	err := c.call(ctx, http.MethodGet, "/v1/services", nil, &out)
	return out, err
}

// Service describes one service.
func (c *Client) Service(ctx context.Context, name string) (engine.ServiceView, error) {
	var out engine.ServiceView
	err := c.call(ctx, http.MethodGet, serviceURL(name), nil, &out)
	return out, err
}

// Flows lists the flows the datapath tracks for a service, within filter.
func (c *Client) Flows(ctx context.Context, name string, filter datapath.FlowFilter) (datapath.FlowList, error) {
	q := url.Values{"limit": {strconv.Itoa(filter.Limit)}}
	if filter.Backend.IsValid() {
		q.Set("backend", filter.Backend.String())
		if filter.BackendPort != 0 {
			q.Set("backend", netip.AddrPortFrom(filter.Backend, filter.BackendPort).String())
		}
	}
	var out datapath.FlowList
	err := c.call(ctx, http.MethodGet, serviceURL(name)+"/flows?"+q.Encode(), nil, &out)
	return out, err
}

// AddService creates a service; on a dry run only the result's Change is set.
func (c *Client) AddService(ctx context.Context, s config.Service, dryRun bool) (ServiceResult, error) {
	var out ServiceResult
	err := c.call(ctx, http.MethodPost, withDryRun("/v1/services", dryRun), jsonBody(s), &out)
	return out, err
}

// PutService replaces (or creates) the service s.Name; on a dry run only the result's Change is set.
func (c *Client) PutService(ctx context.Context, s config.Service, dryRun bool) (ServiceResult, error) {
	var out ServiceResult
	err := c.call(ctx, http.MethodPut, withDryRun(serviceURL(s.Name), dryRun), jsonBody(s), &out)
	return out, err
}

// RemoveService removes a service.
func (c *Client) RemoveService(ctx context.Context, name string, dryRun bool) (plan.Change, error) {
	var out ChangeResult
	err := c.call(ctx, http.MethodDelete, withDryRun(serviceURL(name), dryRun), nil, &out)
	return out.Change, err
}

// AddBackend adds a backend to a service; on a dry run only the result's Change is set.
func (c *Client) AddBackend(ctx context.Context, service string, b config.Backend, dryRun bool) (BackendResult, error) {
	var out BackendResult
	err := c.call(ctx, http.MethodPost, withDryRun(serviceURL(service)+"/backends", dryRun), jsonBody(b), &out)
	return out, err
}

// Backend describes one backend: "10.0.0.1:8080", "[fd00::1]:80", or a bare address when only
// one backend of the service has it.
func (c *Client) Backend(ctx context.Context, service, backend string) (engine.BackendView, error) {
	var out engine.BackendView
	err := c.call(ctx, http.MethodGet, backendURL(service, backend), nil, &out)
	return out, err
}

// SetWeight changes a backend's weight; on a dry run only the result's Change is set.
func (c *Client) SetWeight(ctx context.Context, service, backend string, weight int, dryRun bool) (BackendResult, error) {
	var out BackendResult
	err := c.call(ctx, http.MethodPatch, withDryRun(backendURL(service, backend), dryRun), jsonBody(weightBody{Weight: &weight}), &out)
	return out, err
}

// RemoveBackend removes a backend from its service.
func (c *Client) RemoveBackend(ctx context.Context, service, backend string, dryRun bool) (plan.Change, error) {
	var out ChangeResult
	err := c.call(ctx, http.MethodDelete, withDryRun(backendURL(service, backend), dryRun), nil, &out)
	return out.Change, err
}

// Drain starts draining a backend (timeout 0: the daemon's default) and returns the drain; a dry
// run returns instead what setting its weight to 0 would change.
func (c *Client) Drain(ctx context.Context, service, backend string, timeout time.Duration, dryRun bool) (engine.DrainView, plan.Change, error) {
	var body *requestBody
	if timeout > 0 {
		body = jsonBody(drainBody{Timeout: timeout.String()})
	}
	path := withDryRun(backendURL(service, backend)+"/drain", dryRun)
	if dryRun {
		var out ChangeResult
		err := c.call(ctx, http.MethodPost, path, body, &out)
		return engine.DrainView{}, out.Change, err
	}
	var out engine.DrainView
	err := c.call(ctx, http.MethodPost, path, body, &out)
	return out, plan.Change{}, err
}

// Drains lists the drains in progress and finished.
func (c *Client) Drains(ctx context.Context) ([]engine.DrainView, error) {
	var out []engine.DrainView
	err := c.call(ctx, http.MethodGet, "/v1/drains", nil, &out)
	return out, err
}

// BGP returns the node's BGP sessions and the announcement of each VIP.
func (c *Client) BGP(ctx context.Context) (engine.BGPView, error) {
	var out engine.BGPView
	err := c.call(ctx, http.MethodGet, "/v1/bgp", nil, &out)
	return out, err
}

// MaxAnswerBytes bounds an answer the client reads: a listing of 10,000 services with their
// backends and counters is about 20 MiB of JSON, and a server (--api) must not make the CLI read
// without end.
const MaxAnswerBytes = 256 << 20

// Sync returns the state of the replication of flows to the other nodes.
func (c *Client) Sync(ctx context.Context) (replication.Status, error) {
	var out replication.Status
	err := c.call(ctx, http.MethodGet, "/v1/sync", nil, &out)
	return out, err
}

// Node returns the node's drain state.
func (c *Client) Node(ctx context.Context) (engine.NodeView, error) {
	var out engine.NodeView
	err := c.call(ctx, http.MethodGet, "/v1/node", nil, &out)
	return out, err
}

// DrainNode withdraws every VIP of the node (timeout 0: the daemon's default) and returns the
// node's state.
func (c *Client) DrainNode(ctx context.Context, timeout time.Duration) (engine.NodeView, error) {
	var body *requestBody
	if timeout > 0 {
		body = jsonBody(drainBody{Timeout: timeout.String()})
	}
	var out engine.NodeView
	err := c.call(ctx, http.MethodPost, "/v1/node/drain", body, &out)
	return out, err
}

// UndrainNode makes the node announce its VIPs again.
func (c *Client) UndrainNode(ctx context.Context) (engine.NodeView, error) {
	var out engine.NodeView
	err := c.call(ctx, http.MethodPost, "/v1/node/undrain", nil, &out)
	return out, err
}

// Health lists every health probe.
func (c *Client) Health(ctx context.Context) ([]engine.HealthView, error) {
	var out []engine.HealthView
	err := c.call(ctx, http.MethodGet, "/v1/health", nil, &out)
	return out, err
}

// Config returns the running config as YAML.
func (c *Client) Config(ctx context.Context) ([]byte, error) {
	var out []byte
	err := c.call(ctx, http.MethodGet, "/v1/config?format=yaml", nil, &out)
	return out, err
}

// PutConfig replaces the running config with a YAML one.
func (c *Client) PutConfig(ctx context.Context, yaml []byte, dryRun bool) (plan.Change, error) {
	var out ChangeResult
	err := c.call(ctx, http.MethodPut, withDryRun("/v1/config", dryRun), yamlBody(yaml), &out)
	return out.Change, err
}

// Plan tells what replacing the running config with a YAML one would change, changing nothing.
func (c *Client) Plan(ctx context.Context, yaml []byte) (plan.Change, error) {
	var out plan.Change
	err := c.call(ctx, http.MethodPost, "/v1/plan", yamlBody(yaml), &out)
	return out, err
}

// Reload makes the daemon read its config file again.
func (c *Client) Reload(ctx context.Context) (plan.Change, error) {
	var out ChangeResult
	err := c.call(ctx, http.MethodPost, "/v1/reload", nil, &out)
	return out.Change, err
}

// Events returns the events after since; with wait > 0 (at most MaxEventWait) it waits that long
// for the first one.
func (c *Client) Events(ctx context.Context, since uint64, wait time.Duration) ([]engine.Event, error) {
	query := url.Values{"since": {strconv.FormatUint(since, 10)}}
	if wait > 0 {
		query.Set("wait", wait.String())
	}
	var out []engine.Event
	err := c.call(ctx, http.MethodGet, "/v1/events?"+query.Encode(), nil, &out)
	return out, err
}

// requestBody is a request body and its Content-Type.
type requestBody struct {
	contentType string
	data        []byte
}

func jsonBody(v any) *requestBody {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("api: request body does not encode: %v", err)) // config types always encode
	}
	return &requestBody{mediaJSON, data}
}

func yamlBody(data []byte) *requestBody { return &requestBody{mediaYAML, data} }

// call sends a request and decodes a 2xx answer into out: JSON, or the raw bytes for a *[]byte.
func (c *Client) call(ctx context.Context, method, path string, body *requestBody, out any) error {
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body.data)
	}
	if c.NoWait && method != http.MethodGet {
		path += map[bool]string{true: "&", false: "?"}[strings.Contains(path, "?")] + "wait=false"
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, reader)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", body.contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := boundedread.Reader(resp.Body, method+" "+path+": the answer", MaxAnswerBytes)
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errorFrom(resp.StatusCode, data)
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = data
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: the answer does not decode: %w", method, path, err)
	}
	return nil
}

// errorFrom reads an error answer; one that is not the API's JSON keeps its text.
func errorFrom(status int, body []byte) *Error {
	e := &Error{}
	if err := json.Unmarshal(body, e); err != nil || e.Message == "" {
		e = &Error{Message: strings.TrimSpace(string(body))}
	}
	e.Status = status
	return e
}

func serviceURL(name string) string { return "/v1/services/" + url.PathEscape(name) }

func backendURL(service, backend string) string {
	return serviceURL(service) + "/backends/" + url.PathEscape(backend)
}

func withDryRun(path string, dryRun bool) string {
	if dryRun {
		return path + "?dry_run=true"
	}
	return path
}
