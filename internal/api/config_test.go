package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/engine"
)

func TestGetConfig(t *testing.T) {
	f := newFixture(t)
	want := f.engine.Config()

	code, body := f.do(t, http.MethodGet, "/v1/config", "", nil)
	var fromJSON config.Config
	if code != http.StatusOK || json.Unmarshal(body, &fromJSON) != nil || !reflect.DeepEqual(&fromJSON, want) {
		t.Fatalf("GET /v1/config = %d %s, want the running config", code, body)
	}

	yamlText, err := f.client.Config(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fromYAML, err := config.Parse("answer", yamlText)
	if err != nil || !reflect.DeepEqual(fromYAML, want) {
		t.Fatalf("GET /v1/config?format=yaml = %s (%v), want the running config", yamlText, err)
	}

	req, err := http.NewRequest(http.MethodGet, f.url+"/v1/config", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/html, application/yaml;q=0.9")
	resp, err := f.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Content-Type"); got != mediaYAML {
		t.Fatalf("Accept: application/yaml answered Content-Type %q", got)
	}
}

func TestPutConfigAndPlan(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	withoutDNS, _, found := strings.Cut(baseConfig, "  - name: dns")
	if !found {
		t.Fatal("the base config has no dns service")
	}

	change, err := f.client.Plan(ctx, []byte(withoutDNS))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(change.Removed, []string{"dns"}) || len(change.Changed)+len(change.Added) != 0 {
		t.Fatalf("Plan = %+v, want dns removed", change)
	}
	if _, _, err := engine.FindService(f.engine.Config(), "dns"); err != nil {
		t.Fatalf("Plan changed the running config: %v", err)
	}

	change, err = f.client.PutConfig(ctx, []byte(withoutDNS), false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(change.Removed, []string{"dns"}) {
		t.Fatalf("PutConfig = %+v, want dns removed", change)
	}
	if len(f.engine.Config().Services) != 1 {
		t.Fatalf("running config still has %d services", len(f.engine.Config().Services))
	}

	asJSON, err := json.Marshal(mustParse(t, baseConfig))
	if err != nil {
		t.Fatal(err)
	}
	code, body := f.do(t, http.MethodPut, "/v1/config", mediaJSON, asJSON)
	if code != http.StatusOK || !strings.Contains(string(body), `"added":["dns"]`) {
		t.Fatalf("PUT /v1/config (JSON) = %d %s, want dns added", code, body)
	}
	f.settle(t)
}

func TestReload(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	extra := baseConfig + `
  - name: api
    vip: 192.0.2.20
    port: 443
    backends: [{address: 10.0.2.1}]
`
	if err := os.WriteFile(f.configFile, []byte(extra), 0o644); err != nil {
		t.Fatal(err)
	}
	change, err := f.client.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(change.Added, []string{"api"}) {
		t.Fatalf("Reload = %+v, want api added", change)
	}

	broken := strings.Replace(extra, "address: 10.0.2.1", "address: 10.0.2", 1)
	if err := os.WriteFile(f.configFile, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	upTo, _, found := strings.Cut(broken, "address: 10.0.2}")
	if !found {
		t.Fatal("the broken config lost its bad address")
	}
	line := strings.Count(upTo, "\n") + 1
	before := f.engine.Config()
	var apiErr *Error
	if _, err := f.client.Reload(ctx); !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest ||
		apiErr.Field != "services[2].backends[0].address" || apiErr.Errors[0].Line != line {
		t.Fatalf("reload of a broken file: %#v, want 400 on services[2].backends[0].address at line %d", err, line)
	}
	if !reflect.DeepEqual(before, f.engine.Config()) {
		t.Fatal("a failed reload changed the running config")
	}
	events, err := f.client.Events(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(events, func(ev engine.Event) bool {
		return ev.Type == engine.EventReloadFailed && strings.Contains(ev.Message, fmt.Sprintf("sluice.yaml:%d: services[2].backends[0].address", line))
	}) {
		t.Fatalf("no reload_failed event naming the file and line: %+v", events)
	}

	withoutFile := httptest.NewServer(NewHandler(f.engine, Info{}))
	t.Cleanup(withoutFile.Close)
	c := NewTCPClient(withoutFile.URL, "")
	c.http = f.http
	if _, err := c.Reload(ctx); !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict {
		t.Fatalf("reload without a config file: %v, want 409", err)
	}
}

func mustParse(t testing.TB, text string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
