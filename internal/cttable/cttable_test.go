package cttable

import (
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/ctnetlink"
)

// testTable is a Table with the kernel's default timeouts, the sync link's address ignored.
func testTable() *Table {
	t := &Table{ignore: map[netip.Addr]bool{netip.MustParseAddr("10.78.0.1"): true}}
	t.timeouts.tcp[nl.TCP_CONNTRACK_ESTABLISHED] = 432000 * time.Second
	t.timeouts.tcp[nl.TCP_CONNTRACK_TIME_WAIT] = 120 * time.Second
	t.timeouts.udp = 120 * time.Second
	return t
}

// An entry a peer can take over goes through a record and back unchanged, its time left
// carried as idle time against the state's timeout.
func TestRecordRoundTrip(t *testing.T) {
	tb := testTable()
	for name, e := range map[string]ctnetlink.Entry{
		"translated":                tcpEntry(netip.MustParseAddrPort("198.51.100.1:1001"), netip.AddrPort{}, nl.TCP_CONNTRACK_ESTABLISHED, 3000),
		"fully translated, closing": tcpEntry(netip.MustParseAddrPort("198.51.100.1:1002"), natSrc, nl.TCP_CONNTRACK_TIME_WAIT, 100),
		"datagram flow": {
			Orig:   ctnetlink.Tuple{Proto: unix.IPPROTO_UDP, Src: netip.MustParseAddrPort("198.51.100.2:53000"), Dst: netip.MustParseAddrPort("192.0.2.10:53")},
			Reply:  ctnetlink.Tuple{Proto: unix.IPPROTO_UDP, Src: netip.MustParseAddrPort("10.1.0.5:53"), Dst: netip.MustParseAddrPort("198.51.100.2:53000")},
			Status: ctnetlink.StatusSeenReply | ctnetlink.StatusAssured, Timeout: 90,
		},
	} {
		f, ok := tb.record(e)
		if !ok {
			t.Errorf("%s: not sent", name)
			continue
		}
		if want := tb.timeouts.of(f) - time.Duration(e.Timeout)*time.Second; f.Idle != want {
			t.Errorf("%s: idle %s, want %s", name, f.Idle, want)
		}
		back, reason := tb.entry(&f)
		if reason != "" || back.Orig != e.Orig || back.Reply != e.Reply || back.TCPState != e.TCPState || back.Timeout != e.Timeout {
			t.Errorf("%s: written back as %+v (%q), want %+v", name, back, reason, e)
		}
	}
}

// What a peer cannot take over is not sent; what this node's timeouts have expired is not
// written.
func TestRecordSkips(t *testing.T) {
	tb := testTable()
	client := netip.MustParseAddrPort("198.51.100.1:1003")
	handshake := tcpEntry(client, netip.AddrPort{}, nl.TCP_CONNTRACK_SYN_SENT, 100)
	zoned := tcpEntry(client, netip.AddrPort{}, nl.TCP_CONNTRACK_ESTABLISHED, 100)
	zoned.Zone = 7
	syncLink := tcpEntry(netip.MustParseAddrPort("10.78.0.1:3000"), netip.AddrPort{}, nl.TCP_CONNTRACK_ESTABLISHED, 100)
	loopback := tcpEntry(netip.MustParseAddrPort("127.0.0.1:3000"), netip.AddrPort{}, nl.TCP_CONNTRACK_ESTABLISHED, 100)
	unanswered := ctnetlink.Entry{
		Orig:  ctnetlink.Tuple{Proto: unix.IPPROTO_UDP, Src: client, Dst: netip.MustParseAddrPort("192.0.2.10:53")},
		Reply: ctnetlink.Tuple{Proto: unix.IPPROTO_UDP, Src: netip.MustParseAddrPort("10.1.0.5:53"), Dst: client},
	}
	for name, e := range map[string]ctnetlink.Entry{"handshake": handshake, "zoned": zoned, "sync link": syncLink,
		"loopback": loopback, "unanswered datagram flow": unanswered} {
		if f, ok := tb.record(e); ok {
			t.Errorf("%s sent: %+v", name, f)
		}
	}
	f, _ := tb.record(tcpEntry(client, netip.AddrPort{}, nl.TCP_CONNTRACK_ESTABLISHED, 100))
	shorter := testTable()
	shorter.timeouts.tcp[nl.TCP_CONNTRACK_ESTABLISHED] = time.Hour // idle 431,900 s: past it
	if _, reason := shorter.entry(&f); reason != SkipExpired {
		t.Errorf("a record idle past this node's timeout: %q, want %q", reason, SkipExpired)
	}
	f.TCPState = nl.TCP_CONNTRACK_SYN_SENT
	if _, reason := tb.entry(&f); reason != SkipNotConntrack {
		t.Errorf("a record in a handshake state: %q, want %q", reason, SkipNotConntrack)
	}
}
