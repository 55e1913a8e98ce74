package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
)

// execConfig is baseConfig with an exec check on web, as only the config file may give one.
var execConfig = strings.Replace(baseConfig, "health_check: {type: tcp}", "health_check: {type: exec, command: [/usr/local/bin/check-web]}", 1)

// TestExecChecksOverTCP checks that a token holder cannot make the daemon run a command of his
// (it runs as root), while the file's exec checks stay and the rest of their service can change.
func TestExecChecksOverTCP(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := os.WriteFile(f.configFile, []byte(execConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	web := serviceOf(t, f, "web")

	web.Backends = append(web.Backends, config.Backend{Address: config.IPOf("10.0.0.4"), Port: 8080})
	web.HealthCheck.Interval = config.DurationOf("5s")
	if _, err := f.client.PutService(ctx, web, false); err != nil {
		t.Fatalf("a change beside the file's exec check: %v", err)
	}
	yamlText, err := f.client.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.PutConfig(ctx, yamlText, false); err != nil {
		t.Fatalf("the running config put back as it is: %v", err)
	}

	web.HealthCheck.Command = []string{"sh", "-c", "id"}
	dns := serviceOf(t, f, "dns")
	dns.HealthCheck = &config.HealthCheck{Type: "exec", Command: []string{"/usr/local/bin/check-web"}}
	for what, put := range map[string]config.Service{"a changed command": web, "a check copied to another service": dns} {
		var refused *Error
		if _, err := f.client.PutService(ctx, put, false); !errors.As(err, &refused) || refused.Status != http.StatusForbidden || refused.Field != "health_check.command" {
			t.Errorf("%s: %v, want 403 on health_check.command", what, err)
		}
	}
	if got := serviceOf(t, f, "web").HealthCheck.Command; len(got) != 1 || got[0] != "/usr/local/bin/check-web" {
		t.Fatalf("the running command became %q", got)
	}

	allowed := "api: {allow_exec_checks: true}\n" + execConfig
	if err := os.WriteFile(f.configFile, []byte(allowed), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.PutService(ctx, web, false); err != nil {
		t.Fatalf("with api.allow_exec_checks: %v", err)
	}
}

// TestRootOnTheSocketMayRunCommands checks that the unix socket, which only root can open, may
// add exec checks and set the api section, as sluice apply hands files to the daemon that way.
func TestRootOnTheSocketMayRunCommands(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	socket := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f.handler}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	c := NewUnixClient(socket)

	if _, err := c.PutConfig(ctx, []byte("api: {allow_exec_checks: false}\n"+execConfig), false); err != nil {
		t.Fatalf("a config with an exec check over the socket: %v", err)
	}
	web := serviceOf(t, f, "web")
	web.HealthCheck.Command = []string{"/usr/local/bin/check-web", "--deep"}
	if _, err := c.PutService(ctx, web, false); err != nil {
		t.Fatalf("a changed command over the socket: %v", err)
	}
}

// TestAddressesOfAPIBodiesAreCanonical checks that an IPv4-mapped IPv6 address from the API is
// kept as its IPv4 address, so that it meets the same address written the other way.
func TestAddressesOfAPIBodiesAreCanonical(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	added, err := f.client.AddBackend(ctx, "web", config.Backend{Address: config.IPOf("::ffff:10.0.0.9"), Port: 8080}, false)
	if err != nil {
		t.Fatal(err)
	}
	if added.Backend.Address != "10.0.0.9" {
		t.Fatalf("added backend %+v, want address 10.0.0.9", added.Backend)
	}
	if got := serviceOf(t, f, "web").Backends[3].Address; got.String() != "10.0.0.9" {
		t.Fatalf("the running config holds %q", got)
	}
	var conflict *Error
	if _, err := f.client.AddBackend(ctx, "web", config.Backend{Address: config.IPOf("10.0.0.9"), Port: 8080}, false); !errors.As(err, &conflict) || conflict.Status != http.StatusConflict {
		t.Fatalf("the same backend written the other way: %v, want 409", err)
	}
	api := config.Service{Name: "api", VIP: config.IPOf("::ffff:192.0.2.20"), Port: config.Range{First: 443, Last: 443},
		Backends: []config.Backend{{Address: config.IPOf("::ffff:10.0.2.1")}}}
	if _, err := f.client.AddService(ctx, api, false); err != nil {
		t.Fatal(err)
	}
	if got := serviceOf(t, f, "api"); got.VIP.String() != "192.0.2.20" || got.Backends[0].Address.String() != "10.0.2.1" {
		t.Fatalf("the running config holds %s and %s", got.VIP, got.Backends[0].Address)
	}
}

// serviceOf returns the named service of the running config.
func serviceOf(t *testing.T, f *fixture, name string) config.Service {
	t.Helper()
	for _, s := range f.engine.Config().Services {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no service %s", name)
	return config.Service{}
}

// reloadWithBGP makes the fixture's config file bgp (one line) plus baseConfig, reloads it and
// returns the running config as the TCP API shows it, in YAML.
func reloadWithBGP(t *testing.T, f *fixture, bgp string) []byte {
	t.Helper()
	ctx := context.Background()
	if err := os.WriteFile(f.configFile, []byte(bgp+"\n"+baseConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	yamlText, err := f.client.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return yamlText
}

// TestBGPPasswordsOverTCP checks that a token holder reads no BGP password, may put the config
// back as read, and may not change the bgp section.
func TestBGPPasswordsOverTCP(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	yamlText := reloadWithBGP(t, f, "bgp: {asn: 65100, router_id: 10.9.0.11, peers: [{address: 10.9.0.1, asn: 65000, password: s3cret}]}")
	if strings.Contains(string(yamlText), "s3cret") || !strings.Contains(string(yamlText), config.RedactedPassword) {
		t.Fatalf("the TCP API shows the password:\n%s", yamlText)
	}
	if _, err := f.client.PutConfig(ctx, yamlText, false); err != nil {
		t.Fatalf("the running config put back as read: %v", err)
	}
	changed := strings.Replace(string(yamlText), config.RedactedPassword, "guess", 1)
	var refused *Error
	if _, err := f.client.PutConfig(ctx, []byte(changed), false); !errors.As(err, &refused) || refused.Status != http.StatusForbidden {
		t.Fatalf("a changed password: %v, want 403", err)
	}
}

// TestConfigPutBackAsReadWithEmptyLists: a config file may write an empty list where the API's
// answers leave it out ("communities: []"); the config read over TCP, as YAML or as JSON, is
// still put back unchanged, bgp section included.
func TestConfigPutBackAsReadWithEmptyLists(t *testing.T) {
	f := newFixture(t)
	yamlText := reloadWithBGP(t, f, "bgp: {asn: 65100, router_id: 10.9.0.11, peers: [{address: 10.9.0.1, asn: 65000, communities: []}]}")
	if _, err := f.client.PutConfig(context.Background(), yamlText, false); err != nil {
		t.Fatalf("the running config put back as read in YAML: %v", err)
	}
	status, jsonText := f.do(t, http.MethodGet, "/v1/config?format=json", "", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /v1/config?format=json: %d %s", status, jsonText)
	}
	if status, body := f.do(t, http.MethodPut, "/v1/config", mediaJSON, jsonText); status != http.StatusOK {
		t.Fatalf("the running config put back as read in JSON: %d %s", status, body)
	}
}
