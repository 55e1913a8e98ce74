package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluicelb/sluice/internal/config"
)

// sectionChange is a change to one top-level section of the config, and how the API answers it.
type sectionChange struct {
	change func(*config.Config)
	// status is the answer over TCP (a token), and root the answer on the unix socket.
	status, root int
	field        string // that a refusal names
}

// sectionChanges holds, for each field of config.Config, changes to it that PUT /v1/config sends.
var sectionChanges = map[string][]sectionChange{
	"Datapath": {{func(c *config.Config) { c.Datapath = config.DatapathEBPF }, 400, 400, "datapath"}},
	"Attach":   {{func(c *config.Config) { c.Attach = config.AttachXDP }, 400, 400, "attach"}},
	"State": {
		{func(c *config.Config) { c.State = config.State{Persist: "state-file", Path: "/etc/cron.d/sluice"} }, 403, 403, "state.path"},
		{func(c *config.Config) { c.State = config.State{Persist: "config-file"} }, 403, 403, "state.persist"},
		{func(c *config.Config) { c.State = config.State{Persist: "off"} }, 403, 403, "state.persist"},
	},
	"Interfaces": {{func(c *config.Config) { c.Interfaces = []string{"eth9"} }, 200, 200, ""}},
	"EBPF":       {{func(c *config.Config) { c.EBPF = &config.EBPFSizes{MaxFlows: 1 << 12} }, 400, 400, "ebpf"}},
	"NFT":        {{func(c *config.Config) { c.NFT = &config.NFTOptions{PacketCounters: new(bool)} }, 200, 200, ""}},
	"API":        {{func(c *config.Config) { c.API = &config.APIPolicy{AllowExecChecks: true} }, 403, 200, "api"}},
	"BGP": {{func(c *config.Config) {
		c.BGP = &config.BGP{ASN: 65100, RouterID: config.IPOf("10.9.0.11"), Peers: []config.BGPPeer{{Address: config.IPOf("10.9.0.1"), ASN: 65000}}}
	}, 403, 200, "bgp"}},
	"Sync": {{func(c *config.Config) {
		c.Sync = &config.Sync{Interface: "eth1", Peers: []config.IP{config.IPOf("10.91.4.12")}, SecretFile: "/etc/sluice/sync.key"}
	}, 403, 200, "sync"}},
	"Services": {{func(c *config.Config) { c.Services = c.Services[:1] }, 200, 200, ""}},
}

// TestWhatTheAPIMayChange puts a config changed in one top-level section at a time, over TCP (a
// token) and on the unix socket (root): the state section is the file's alone (403 for both),
// api, bgp and sync are the file's or root's (403 over TCP), the datapath's sections take a restart
// (400), the rest may change. Every field of config.Config must be in sectionChanges, so that a
// new section is not forgotten.
func TestWhatTheAPIMayChange(t *testing.T) {
	fields := reflect.TypeFor[config.Config]()
	for i := range fields.NumField() {
		name := fields.Field(i).Name
		if len(sectionChanges[name]) == 0 {
			t.Errorf("config.Config.%s: no change in sectionChanges says whether the API may make it", name)
		}
	}
	for name, changes := range sectionChanges {
		if _, ok := fields.FieldByName(name); !ok {
			t.Errorf("sectionChanges: config.Config has no field %s", name)
		}
		for _, sc := range changes {
			for _, overTCP := range []bool{true, false} {
				f := newFixture(t)
				c, want := f.client, sc.status
				if !overTCP {
					c, want = unixClient(t, f), sc.root
				}
				before := f.engine.Config()
				next := f.engine.Config()
				sc.change(next)
				_, err := c.PutConfig(context.Background(), mustYAML(t, next), false)
				var answer *Error
				switch {
				case want == http.StatusOK && err != nil:
					t.Errorf("%s (tcp %v): %v, want it accepted", name, overTCP, err)
				case want == http.StatusOK:
				case !errors.As(err, &answer) || answer.Status != want || answer.Field != sc.field:
					t.Errorf("%s (tcp %v): %v, want %d naming %s", name, overTCP, err, want, sc.field)
				case !reflect.DeepEqual(before, f.engine.Config()):
					t.Errorf("%s (tcp %v): refused, but the running config changed", name, overTCP)
				}
			}
		}
	}
}

// TestStateLeftOutKeepsTheRunningOne checks that a config sent without a state section keeps the
// running one, and one sent back as read is accepted.
func TestStateLeftOutKeepsTheRunningOne(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	state := config.State{Persist: "off"}
	next := f.engine.Config()
	next.State = state
	if _, err := f.engine.Update(false, "test: the file's state section", func(c *config.Config) error { *c = *next; return nil }); err != nil {
		t.Fatal(err)
	}
	next.State = config.State{}
	next.Services = next.Services[:1]
	if _, err := f.client.PutConfig(ctx, mustYAML(t, next), false); err != nil {
		t.Fatal(err)
	}
	if got := f.engine.Config(); got.State != state || len(got.Services) != 1 {
		t.Fatalf("the running config has state %+v and %d services, want %+v and 1", got.State, len(got.Services), state)
	}
	yamlText, err := f.client.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.PutConfig(ctx, yamlText, false); err != nil {
		t.Fatalf("the running config put back as read: %v", err)
	}
}

// mustYAML is cfg as a config file holds it.
func mustYAML(t *testing.T, cfg *config.Config) []byte {
	t.Helper()
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// unixClient serves f's API on a unix socket, as root reaches it, and returns a client of it.
func unixClient(t *testing.T, f *fixture) *Client {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f.handler}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return NewUnixClient(socket)
}
