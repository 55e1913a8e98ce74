package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/engine"
)

func weight(n int) *int { return &n }

func TestServiceCRUD(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()

	services, err := f.client.Services(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if names := serviceNames(services); !slices.Equal(names, []string{"web", "dns"}) {
		t.Fatalf("services = %v, want web, dns", names)
	}

	api := config.Service{Name: "api", VIP: config.IPOf("192.0.2.20"), Port: config.Range{First: 443, Last: 443},
		Backends: []config.Backend{{Address: config.IPOf("10.0.2.1"), Port: 8443}, {Address: config.IPOf("10.0.2.2"), Port: 8443, Weight: weight(3)}}}
	added, err := f.client.AddService(ctx, api, false)
	if err != nil {
		t.Fatal(err)
	}
	if added.Service.Name != "api" || len(added.Service.Backends) != 2 || !slices.Equal(added.Change.Added, []string{"api"}) {
		t.Fatalf("AddService = %+v", added)
	}
	var conflict *Error
	if _, err := f.client.AddService(ctx, api, false); !errors.As(err, &conflict) || conflict.Status != http.StatusConflict {
		t.Fatalf("adding api again: %v, want 409", err)
	}

	api.Mode = "fullnat"
	api.Name = "" // PUT takes the name from the path
	if err := f.client.call(ctx, http.MethodPut, serviceURL("api"), jsonBody(api), new(ServiceResult)); err != nil {
		t.Fatal(err)
	}
	got, err := f.client.Service(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode != "fullnat" {
		t.Fatalf("after PUT, mode = %q, want fullnat", got.Mode)
	}
	api.Name = "other"
	var mismatch *Error
	if err := f.client.call(ctx, http.MethodPut, serviceURL("api"), jsonBody(api), new(ServiceResult)); !errors.As(err, &mismatch) || mismatch.Field != "name" {
		t.Fatalf("PUT with another name in the body: %v, want 400 on name", err)
	}

	created, err := f.client.PutService(ctx, config.Service{Name: "smtp", VIP: config.IPOf("192.0.2.25"), Port: config.Range{First: 25, Last: 25}, Fallback: "reject"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(created.Change.Added, []string{"smtp"}) {
		t.Fatalf("PUT of a new service: change %+v, want smtp added", created.Change)
	}

	change, err := f.client.RemoveService(ctx, "api", false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(change.Removed, []string{"api"}) {
		t.Fatalf("RemoveService change = %+v", change)
	}
	var missing *Error
	if _, err := f.client.Service(ctx, "api"); !errors.As(err, &missing) || missing.Status != http.StatusNotFound {
		t.Fatalf("removed service: %v, want 404", err)
	}
	if _, err := f.client.RemoveService(ctx, "api", false); !errors.As(err, &missing) || missing.Status != http.StatusNotFound {
		t.Fatalf("removing it again: %v, want 404", err)
	}
	f.settle(t)
}

func TestBackendCRUD(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()

	added, err := f.client.AddBackend(ctx, "web", config.Backend{Address: config.IPOf("10.0.0.4"), Port: 8080, Weight: weight(2)}, false)
	if err != nil {
		t.Fatal(err)
	}
	if added.Backend.ID != "10.0.0.4:8080" || added.Backend.Weight != 2 || !slices.Equal(added.Change.Changed, []string{"web"}) {
		t.Fatalf("AddBackend = %+v", added)
	}
	var conflict *Error
	if _, err := f.client.AddBackend(ctx, "web", config.Backend{Address: config.IPOf("10.0.0.4"), Port: 8080}, false); !errors.As(err, &conflict) || conflict.Status != http.StatusConflict {
		t.Fatalf("adding 10.0.0.4:8080 again: %v, want 409", err)
	}

	view, err := f.client.Backend(ctx, "web", "10.0.0.4")
	if err != nil {
		t.Fatal(err)
	}
	if view.ID != "10.0.0.4:8080" || view.Health != "up" {
		t.Fatalf("Backend = %+v", view)
	}
	if _, err := f.client.Backend(ctx, "dns", "10.0.1.2"); err != nil {
		t.Fatal(err)
	}

	reweighted, err := f.client.SetWeight(ctx, "web", "10.0.0.1:8080", 5, false)
	if err != nil {
		t.Fatal(err)
	}
	if reweighted.Backend.Weight != 5 {
		t.Fatalf("SetWeight backend = %+v", reweighted.Backend)
	}
	if moved := reweighted.Change.Moved["web"]; moved <= 0 || moved >= 1 {
		t.Fatalf("weight 1 -> 5 moved %v of web's flows, want a share between 0 and 1", moved)
	}

	if _, err := f.client.RemoveBackend(ctx, "web", "10.0.0.4:8080", false); err != nil {
		t.Fatal(err)
	}
	var missing *Error
	if _, err := f.client.Backend(ctx, "web", "10.0.0.4"); !errors.As(err, &missing) || missing.Status != http.StatusNotFound {
		t.Fatalf("removed backend: %v, want 404", err)
	}
	var malformed *Error
	if _, err := f.client.Backend(ctx, "web", "not-an-address"); !errors.As(err, &malformed) || malformed.Status != http.StatusBadRequest || malformed.Field != "backend" {
		t.Fatalf("malformed backend reference: %v, want 400 on backend", err)
	}
	f.settle(t)
}

func TestIPv6BackendReference(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	v6 := config.Service{Name: "v6", VIP: config.IPOf("fd00::10"), Port: config.Range{First: 80, Last: 80},
		Backends: []config.Backend{{Address: config.IPOf("fd00::1"), Port: 80}}}
	if _, err := f.client.AddService(ctx, v6, false); err != nil {
		t.Fatal(err)
	}
	view, err := f.client.Backend(ctx, "v6", "[fd00::1]:80")
	if err != nil {
		t.Fatal(err)
	}
	if view.ID != "[fd00::1]:80" {
		t.Fatalf("ID = %q", view.ID)
	}
	if _, err := f.client.SetWeight(ctx, "v6", "[fd00::1]:80", 0, false); err != nil {
		t.Fatal(err)
	}
}

func TestStatusHealthAndDocument(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	status, err := f.client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status.Version != "test" || status.ConfigFile != f.configFile || status.Apply.Applies == 0 {
		t.Fatalf("Status = %+v", status)
	}
	probes, err := f.client.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(probes) != 3 || probes[0].Target.String() != "10.0.0.1:8080" || !slices.Equal(probes[0].Services, []string{"web"}) {
		t.Fatalf("Health = %+v", probes)
	}
	code, body := f.do(t, http.MethodGet, "/v1/openapi.yaml", "", nil)
	if code != http.StatusOK || !strings.HasPrefix(string(body), "openapi: 3") {
		t.Fatalf("GET /v1/openapi.yaml: %d %.40s", code, body)
	}
}

func TestUnknownRoutesAndMethods(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodDelete, "/v1/status", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v1/plan", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v2/services", http.StatusNotFound},
	} {
		// Straight to the handler: these routes are not in openapi.yaml.
		resp, err := http.DefaultClient.Do(mustRequest(t, tc.method, f.url+tc.path))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s = %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func serviceNames(views []engine.ServiceView) []string {
	var names []string
	for _, v := range views {
		names = append(names, v.Name)
	}
	return names
}
