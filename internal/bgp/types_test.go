package bgp

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestCommunityString(t *testing.T) {
	for c, want := range map[Community]string{65100<<16 | 7: "65100:7", 0: "0:0", 0xffffffff: "65535:65535"} {
		if got := c.String(); got != want {
			t.Errorf("%d: %q, want %q", uint32(c), got, want)
		}
	}
}

func TestConfigNormalize(t *testing.T) {
	peer := Peer{Address: netip.MustParseAddr("10.91.1.1"), ASN: 65000}
	c, err := Config{ASN: 65100, RouterID: netip.MustParseAddr("10.91.1.11"), Peers: []Peer{peer}}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if c.ListenPort != 179 || c.Peers[0].Port != 179 || c.Peers[0].HoldTime != 90*time.Second {
		t.Errorf("defaults: listen %d, port %d, hold %v", c.ListenPort, c.Peers[0].Port, c.Peers[0].HoldTime)
	}
	with := func(f func(*Config)) Config {
		c := Config{ASN: 65100, RouterID: netip.MustParseAddr("10.91.1.11"), ListenPort: -1, Peers: []Peer{peer}}
		f(&c)
		return c
	}
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{with(func(c *Config) { c.ASN = 0 }), "asn: must not be 0"},
		{with(func(c *Config) { c.RouterID = netip.MustParseAddr("2001:db8::1") }), "router_id:"},
		{with(func(c *Config) { c.RouterID = netip.Addr{} }), "router_id:"},
		{with(func(c *Config) { c.ListenPort = -2 }), "listen_port:"},
		{with(func(c *Config) { c.Peers = append(c.Peers, peer) }), "peers[1]: address: 10.91.1.1 is listed twice"},
		{with(func(c *Config) { c.Peers[0].ASN = 0 }), "peers[0]: asn:"},
		{with(func(c *Config) { c.Peers[0].Address = netip.IPv4Unspecified() }), "peers[0]: address:"},
		{with(func(c *Config) { c.Peers[0].Address = netip.MustParseAddr("255.255.255.255") }), "peers[0]: address:"},
		{with(func(c *Config) { c.Peers[0].Address = netip.MustParseAddr("::ffff:224.0.0.5") }), "peers[0]: address:"},
		{with(func(c *Config) { c.Peers[0].HoldTime = 2 * time.Second }), "peers[0]: hold_time:"},
		{with(func(c *Config) { c.Peers[0].HoldTime = 1500 * time.Millisecond }), "peers[0]: hold_time:"},
		{with(func(c *Config) { c.Peers[0].Password = strings.Repeat("x", 81) }), "peers[0]: password:"},
		{with(func(c *Config) { c.Peers[0].NextHop = netip.MustParseAddr("2001:db8::1") }), "peers[0]: next_hop:"},
	} {
		if _, err := tc.c.normalize(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}

func TestAnnouncementsNormalize(t *testing.T) {
	got, err := normalizeAnnouncements([]Announcement{
		{Prefix: netip.MustParsePrefix("2001:db8::1/128")},
		{Prefix: netip.MustParsePrefix("10.91.9.101/32")},
		{Prefix: netip.MustParsePrefix("10.91.9.100/32")},
	})
	if err != nil || got[0].Prefix.String() != "10.91.9.100/32" || got[2].Prefix.String() != "2001:db8::1/128" {
		t.Errorf("sorted: %v, %v", got, err)
	}
	for _, tc := range []struct {
		in   []Announcement
		want string
	}{
		{[]Announcement{{Prefix: netip.MustParsePrefix("10.91.9.0/24")}}, "announcements[0]: prefix: 10.91.9.0/24 is not a host route"},
		{[]Announcement{{}}, "announcements[0]: prefix:"},
		{[]Announcement{{Prefix: netip.MustParsePrefix("0.0.0.0/32")}}, "announcements[0]: prefix:"},
		{[]Announcement{{Prefix: netip.MustParsePrefix("10.91.9.1/32")}, {Prefix: netip.MustParsePrefix("10.91.9.1/32")}}, "announcements[1]: prefix: 10.91.9.1/32 is listed twice"},
	} {
		if _, err := normalizeAnnouncements(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}
