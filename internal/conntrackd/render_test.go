package conntrackd

import (
	"errors"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

// renderCases are the golden files' options: unicast and multicast, both families.
var renderCases = map[string]*Options{
	"udp4": {Interface: "eth1", Address: netip.MustParseAddr("10.91.4.11"), Peers: addrs("10.91.4.12"),
		Port: 3781, StateDir: "/var/lib/sluice/conntrackd", TableSize: 262144},
	"udp6": {Interface: "eth1", Address: netip.MustParseAddr("fd00:91:4::11"), Peers: addrs("fd00:91:4::12"),
		Port: 3781, StateDir: "/var/lib/sluice/conntrackd", TableSize: 65536},
	"group4": {Interface: "sync0", Address: netip.MustParseAddr("10.91.4.11"), Group: netip.MustParseAddr("225.0.0.50"),
		Port: 4000, StateDir: "/run/sluice/ns-a/conntrackd"},
	"peers6": {Interface: "sync0", Address: netip.MustParseAddr("fd00:91:4::11"), Peers: addrs("fd00:91:4::12", "fd00:91:4::13"),
		Port: 3781, StateDir: "/var/lib/sluice/conntrackd", TableSize: 4 << 20},
}

func TestRenderGolden(t *testing.T) {
	for name, o := range renderCases {
		t.Run(name, func(t *testing.T) {
			got, err := Render(o)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", name+".conf")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -update writes it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs (go test -update rewrites it):\n%s", path, got)
			}
		})
	}
}

// TestRenderEssentials checks what the failover depends on, whatever the golden files say.
func TestRenderEssentials(t *testing.T) {
	got, err := Render(renderCases["udp4"])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Mode FTFW {", "DisableExternalCache On", "Port 3781", "Interface eth1",
		"LockFile /var/lib/sluice/conntrackd/conntrackd.lock", "Path /var/lib/sluice/conntrackd/conntrackd.ctl",
		"IPv4_Destination_Address 10.91.4.12", "HashLimit 524288", "IPv4_address 10.91.4.12 # a peer"} {
		if !strings.Contains(got, want) {
			t.Errorf("the configuration lacks %q:\n%s", want, got)
		}
	}
	if _, err := Render(&Options{Interface: "eth1", Peers: addrs("10.0.0.2"), Port: 1, StateDir: "/x"}); err == nil {
		t.Error("rendered without a settled sync.address")
	}
}

func TestHashSize(t *testing.T) {
	for size, want := range map[int]int{1: hashSizeMin, 65536: 16384, 262144: 65536, 300000: 131072, 1 << 30: hashSizeMax} {
		if got := hashSize(size); got != want {
			t.Errorf("hashSize(%d) = %d, want %d", size, got, want)
		}
	}
}

func TestCheckNamesTheField(t *testing.T) {
	good := func() *Options {
		return &Options{Interface: "eth1", Peers: addrs("10.0.0.2"), Port: 3781, StateDir: "/var/lib/sluice/conntrackd"}
	}
	for _, c := range []struct {
		field string
		edit  func(*Options)
	}{
		{"sync.interface", func(o *Options) { o.Interface = "" }},
		{"sync.interface", func(o *Options) { o.Interface = "eth 1" }},
		{"sync.interface", func(o *Options) { o.Interface = "a-very-long-interface" }},
		{"sync", func(o *Options) { o.Peers = nil }},
		{"sync.group", func(o *Options) { o.Group = netip.MustParseAddr("225.0.0.50") }},
		{"sync.group", func(o *Options) { o.Peers, o.Group = nil, netip.MustParseAddr("10.0.0.9") }},
		{"sync.peers[1]", func(o *Options) { o.Peers = addrs("10.0.0.2", "fd00::2") }},
		{"sync.peers[1]", func(o *Options) { o.Peers = addrs("10.0.0.2", "10.0.0.2") }},
		{"sync.peers[0]", func(o *Options) { o.Peers = addrs("224.0.0.1") }},
		{"sync.peers[0]", func(o *Options) { o.Address = o.Peers[0] }},
		{"sync.address", func(o *Options) { o.Address = netip.MustParseAddr("fd00::1") }},
		{"sync.port", func(o *Options) { o.Port = 0 }},
		{"sync.port", func(o *Options) { o.Port = 70000 }},
		{"sync", func(o *Options) { o.StateDir = "relative" }},
		{"sync", func(o *Options) { o.StateDir = "/var/lib/with space" }},
		{"sync", func(o *Options) { o.StateDir = "/" + strings.Repeat("d", 100) }},
	} {
		o := good()
		c.edit(o)
		err := o.Check()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want an error naming %s", o, err, c.field)
		}
	}
	if err := good().Check(); err != nil {
		t.Errorf("good options refused: %v", err)
	}
}

func TestDestination(t *testing.T) {
	o := &Options{Peers: addrs("10.0.0.2")}
	if o.Destination() != o.Peers[0] || o.Multicast() {
		t.Errorf("one peer: destination %s", o.Destination())
	}
	o.Peers = addrs("10.0.0.2", "10.0.0.3")
	if o.Destination() != DefaultGroup4 || !o.Multicast() {
		t.Errorf("two peers: destination %s, want %s", o.Destination(), DefaultGroup4)
	}
	o.Peers = addrs("fd00::2", "fd00::3")
	if o.Destination() != DefaultGroup6 {
		t.Errorf("two IPv6 peers: destination %s, want %s", o.Destination(), DefaultGroup6)
	}
}

func TestGuardRules(t *testing.T) {
	g := guard{iface: "eth1", port: 3781, sources: []netip.Prefix{netip.MustParsePrefix("10.0.0.2/32")}}
	got := strings.Join(g.rules(), "\n")
	want := "iifname \"eth1\" ip saddr { 10.0.0.2 } udp dport 3781 accept\nudp dport 3781 counter name \"foreign\" drop"
	if got != want {
		t.Errorf("rules:\n%s\nwant:\n%s", got, want)
	}
	g = guard{iface: "eth1", port: 3781, sources: []netip.Prefix{netip.MustParsePrefix("fd00::/64")}, group: DefaultGroup6}
	if got := g.rules()[0]; got != "iifname \"eth1\" ip6 saddr { fd00::/64 } ip6 daddr ff02::3780 udp dport 3781 accept" {
		t.Errorf("group rule: %s", got)
	}
}
