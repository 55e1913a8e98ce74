package config

import (
	"strings"
	"testing"
)

// TestAddressesAreCanonical checks that every address is kept in one form whatever form it was
// written in, so that the overlap and duplicate checks, and the datapath, compare like with like.
func TestAddressesAreCanonical(t *testing.T) {
	cfg, err := Parse("x", []byte(`
services:
  - name: a
    vip: "::ffff:10.91.9.100"
    port: 80
    fallback: sorry
    sorry_servers: [{address: "::FFFF:10.91.3.1"}]
    backends: [{address: "::ffff:10.91.2.11"}]
  - name: b
    vip: "FD00:0091:0009:0000:0000:0000:0000:0100"
    port: 80
    backends: [{address: "fd00:91:2:0::11"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Services[0], cfg.Services[1]
	for got, want := range map[string]string{
		a.VIP.String(): "10.91.9.100", a.Backends[0].Address.String(): "10.91.2.11", a.SorryServers[0].Address.String(): "10.91.3.1",
		b.VIP.String(): "fd00:91:9::100", b.Backends[0].Address.String(): "fd00:91:2::11",
	} {
		if got != want {
			t.Errorf("kept %q, want %q", got, want)
		}
	}
	if got := IPOf("::ffff:10.0.0.1").Canonical(); got.String() != "10.0.0.1" {
		t.Errorf("Canonical: %q", got)
	}
	if got := IPOf("not an address").Canonical(); got.String() != "not an address" {
		t.Errorf("Canonical changed text that is no address: %q", got)
	}
}

// TestInterfaceNames follows the kernel's dev_valid_name, narrowed to what nft can name a chain.
func TestInterfaceNames(t *testing.T) {
	for _, name := range []string{"eth0", "enp0s31f6", "br-0a1b2c3d4e5f", "eth0.100", "veth_a", "a", "abcdefghijklmno"} {
		if !validInterfaceName(name) {
			t.Errorf("%q refused", name)
		}
	}
	for _, name := range []string{"", ".", "..", "abcdefghijklmnop", "a/b", "a:1", "a b", "a\tb", "a\nb", "x;flush", `a"b`, "a\x00b", "é"} {
		if validInterfaceName(name) {
			t.Errorf("%q accepted", name)
		}
	}
}

func TestEmptyServicesListIsAConfig(t *testing.T) {
	cfg, err := Parse("x", []byte("services: []\n"))
	if err != nil || cfg.Services == nil || len(cfg.Services) != 0 {
		t.Fatalf("services: [] gave %+v, %v", cfg, err)
	}
	if _, err := Parse("x", []byte("datapath: nft\nservices:\n")); err == nil || !strings.Contains(err.Error(), "x:2: services: missing") {
		t.Fatalf("services: (null) gave %v", err)
	}
}

func TestTableSize(t *testing.T) {
	const tmpl = "services:\n- {name: a, vip: 10.0.0.1, port: 80, table_size: %s, backends: [{address: 10.0.0.2}]}\n"
	for size, want := range map[string]string{
		"1021":    "",
		"-7":      "x:2: services[0].table_size: -7 is out of range 2-1048576",
		"1048583": "x:2: services[0].table_size: 1048583 is out of range",
		"1048575": "x:2: services[0].table_size: 1048575 is not a prime",
	} {
		_, err := Parse("x", []byte(strings.Replace(tmpl, "%s", size, 1)))
		switch {
		case want == "" && err != nil:
			t.Errorf("table_size %s: %v", size, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("table_size %s: got %v, want %q", size, err, want)
		}
	}
}

// TestAPIGuard checks what a TCP API client may change: not the api section, and no exec check
// that does not run already unless the file allows them.
func TestAPIGuard(t *testing.T) {
	running := mustParse(t, `
services:
  - name: db
    vip: 10.0.0.1
    port: 5432
    health_check: {type: exec, command: [/usr/local/bin/check-db]}
    backends: [{address: 10.0.1.1}]
  - name: web
    vip: 10.0.0.2
    port: 80
    backends: [{address: 10.0.1.2}]
`)
	guard := NewAPIGuard(running)

	same := running.Clone()
	same.Services[0].Backends = append(same.Services[0].Backends, Backend{Address: IPOf("10.0.1.9")})
	same.Services[0].HealthCheck.Interval = DurationOf("5s")
	same.Services[0].Backends[1].HealthCheck = &HealthCheck{Type: "exec", Command: []string{"/usr/local/bin/check-db"}}
	if errs := guard.Check(same); len(errs) > 0 {
		t.Errorf("a change beside the file's exec check refused: %v", errs)
	}

	changed := running.Clone()
	changed.Services[0].HealthCheck.Command = []string{"sh", "-c", "id > /tmp/pwned"}
	added := running.Clone()
	added.Services[1].HealthCheck = &HealthCheck{Type: "exec", Command: []string{"/usr/local/bin/check-db"}}
	backend := running.Clone()
	backend.Services[1].Backends[0].HealthCheck = &HealthCheck{Type: "exec", Command: []string{"/bin/sh", "-c", "id"}}
	backendDB := running.Clone()
	backendDB.Services[0].Backends[0].HealthCheck = &HealthCheck{Type: "exec", Command: []string{"/bin/sh", "-c", "{address}"}}
	policy := running.Clone()
	policy.API = &APIPolicy{AllowExecChecks: true}
	peering := running.Clone()
	peering.BGP = &BGP{ASN: 65100, Peers: []BGPPeer{{Address: IPOf("10.0.9.1"), ASN: 65000}}}
	for name, c := range map[string]struct {
		next *Config
		want string
	}{
		"changed command":      {changed, "services[0].health_check.command: an exec check runs its command as root"},
		"added to another one": {added, "services[1].health_check.command: an exec check runs its command as root"},
		"a backend's own":      {backend, "services[1].backends[0].health_check.command: an exec check runs its command as root"},
		"a backend's own, another command": {backendDB,
			"services[0].backends[0].health_check.command: an exec check runs its command as root"},
		"api section": {policy, "api: only the config file sets it"},
		"bgp section": {peering, "bgp: only the config file sets it"},
	} {
		if errs := guard.Check(c.next); len(errs) != 1 || !strings.Contains(errs.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", name, errs, c.want)
		}
	}

	allowed := mustParse(t, "api: {allow_exec_checks: true}\nservices: []\n")
	next := allowed.Clone()
	next.Services = added.Services
	if errs := NewAPIGuard(allowed).Check(next); len(errs) > 0 {
		t.Errorf("allow_exec_checks: true, still refused: %v", errs)
	}
}

func mustParse(t *testing.T, text string) *Config {
	t.Helper()
	cfg, err := Parse("x", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestRedactedPasswordsRoundTrip: a config read through the TCP API shows no BGP password, and
// sent back as it is, keeps the running ones.
func TestRedactedPasswordsRoundTrip(t *testing.T) {
	running := mustParse(t, "bgp: {asn: 65100, peers: [{address: 10.9.0.1, asn: 65000, password: s3cret}, {address: 10.9.0.2, asn: 65000}]}\nservices: []\n")
	shown := running.Redacted()
	if p := shown.BGP.Peers; p[0].Password != RedactedPassword || p[1].Password != "" || running.BGP.Peers[0].Password != "s3cret" {
		t.Fatalf("redacted: %+v, running: %+v", p, running.BGP.Peers)
	}
	if errs := NewAPIGuard(running).Check(shown); len(errs) > 0 || shown.BGP.Peers[0].Password != "s3cret" {
		t.Fatalf("sent back: %v, password %q", errs, shown.BGP.Peers[0].Password)
	}
	guessed := running.Redacted()
	guessed.BGP.Peers[0].Password = "guess"
	if errs := NewAPIGuard(running).Check(guessed); len(errs) != 1 {
		t.Fatalf("a changed password: %v", errs)
	}
}

// TestNFTOptOuts: nft.packet_counters and nft.half_open_timeouts are on unless set false, take
// only a boolean, and apply to datapath nft only.
func TestNFTOptOuts(t *testing.T) {
	const services = "services: []\n"
	for _, key := range []struct {
		name string
		get  func(*Config) bool
	}{{"packet_counters", (*Config).NFTPacketCounters}, {"half_open_timeouts", (*Config).NFTHalfOpenTimeouts}} {
		for text, want := range map[string]bool{"": true, "nft: {" + key.name + ": true}\n": true, "nft: {" + key.name + ": false}\n": false, "nft: {max_elements: 2048}\n": true} {
			cfg, err := Parse("x", []byte(text+services))
			if err != nil || key.get(cfg) != want {
				t.Errorf("%q: %s %v (%v), want %v", text, key.name, cfg != nil && key.get(cfg), err, want)
			}
		}
		for text, want := range map[string]string{
			"nft:\n  " + key.name + ": sometimes\n":            "x:2: nft." + key.name + ": expected true or false",
			"datapath: ebpf\nnft: {" + key.name + ": false}\n": "x:2: nft: only applies to datapath nft, not ebpf",
		} {
			if _, err := Parse("x", []byte(text+services)); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%q: %v, want %q", text, err, want)
			}
		}
	}
}
