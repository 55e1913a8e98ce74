package ebpf

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/decap"
	"github.com/sluicelb/sluice/internal/netnstest"
)

// The traffic lab's tunnel VIPs, held on the backend's loopback, and the backend id each goes to:
// 10.0.9.4 to the IPv4 address (IPv4 in IPv4), fd00:9::4 to the IPv6 one, fd00:9::5 to the IPv4
// one (IPv6 in IPv4) and 10.0.9.5 to the IPv6 one (IPv4 in IPv6). Port 80 goes in IPIP, port
// 81 in GUE, TCP and UDP alike.
var tunnelVIPs = []struct {
	vip     netip.Addr
	backend uint32
}{{mustAddr("10.0.9.4"), 2}, {mustAddr("fd00:9::4"), 4}, {mustAddr("fd00:9::5"), 2}, {mustAddr("10.0.9.5"), 4}}

// tunnels adds the tunnel services to a balancing lab: ids after the others', to its backend.
func (l *trafficLab) tunnels(t *testing.T, objs *sluiceObjects) {
	ipip := sluiceTunnel{Kind: sluiceTunnelKindTUNNEL_IPIP}
	gue := sluiceTunnel{Kind: sluiceTunnelKindTUNNEL_GUE, GuePort: wirePort(decap.DefaultGUEPort)}
	id := uint32(100)
	for _, tv := range tunnelVIPs {
		for port, tn := range map[uint16]sluiceTunnel{80: ipip, 81: gue} {
			for _, proto := range []uint8{protoTCP, protoUDP} {
				id++
				for _, put := range []struct {
					m    interface{ Put(k, v any) error }
					k, v any
				}{
					{objs.Maglev, id, tv.backend}, // port 0
					{objs.ServiceTunnels, id, tn},
					{objs.Vips, vipKeyOf(tv.vip, port, proto), sluiceService{Id: id, RingOffset: id, RingSize: 1, Mode: wireModes[config.ModeTunnel]}},
				} {
					if err := put.m.Put(put.k, put.v); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
}

// decapsulate holds the tunnel VIPs on the backend's loopback and attaches sluice decap to its
// interface, its pins in a BPF filesystem of the test's own; it returns decap's options.
func (l *trafficLab) decapsulate(t *testing.T) decap.Options {
	o := decap.Options{PinPath: filepath.Join(privatePinPath(t), "decap"), Interface: "srv0p", GUEPort: decap.DefaultGUEPort}
	netnstest.In(t, l.backend, func() {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		for _, tv := range tunnelVIPs {
			addr, err := netlink.ParseAddr(netip.PrefixFrom(tv.vip, tv.vip.BitLen()).String())
			if err != nil {
				t.Fatal(err)
			}
			addr.Flags = unix.IFA_F_NODAD
			if err := netlink.AddrAdd(lo, addr); err != nil {
				t.Fatal(err)
			}
		}
		if err := decap.Attach(o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			netnstest.In(t, l.backend, func() {
				if err := decap.Detach(o); err != nil {
					t.Error(err)
				}
			})
		})
	})
	return o
}

// TestTrafficThroughTunnels: TCP and UDP through IPIP and GUE tunnel services, IPv4 and IPv6,
// and IPv6 in IPv4 and IPv4 in IPv6 (a VIP and its backend of different families), on tc and
// XDP, to a backend decapsulating with sluice decap (this kernel has no ipip, sit or fou): a
// megabyte echoed over TCP (GSO packets grow by the outer headers) and UDP datagrams.
func TestTrafficThroughTunnels(t *testing.T) {
	for _, h := range []hook{hookTC, hookXDP} {
		t.Run(h.String(), func(t *testing.T) {
			l := newTrafficLab(t)
			if h == hookXDP { // XDP cannot resolve neighbours: dsr and tunnel need them resolved
				netnstest.In(t, l.client, func() { setTxChecksumming(t, "cli0p", false) })
				l.backendNeighbours(t)
			}
			var addrs []string
			for _, tv := range tunnelVIPs {
				addrs = append(addrs, netip.AddrPortFrom(tv.vip, 80).String(), netip.AddrPortFrom(tv.vip, 81).String())
			}
			o := l.decapsulate(t)
			l.serve(t, addrs...)
			l.tunnels(t, l.balance(t, h))
			for _, tv := range tunnelVIPs {
				for port, kind := range map[uint16]string{80: "ipip", 81: "gue"} {
					to := netip.AddrPortFrom(tv.vip, port)
					t.Run(fmt.Sprintf("%s/%v/tcp", kind, tv.vip), func(t *testing.T) { l.echoTCP(t, to) })
					t.Run(fmt.Sprintf("%s/%v/udp", kind, tv.vip), func(t *testing.T) { l.echoUDP(t, to) })
				}
			}
			st, err := decap.ReadStatus(o)
			if err != nil {
				t.Fatal(err)
			}
			if c := st.Counts; c.IPIP == 0 || c.GUE == 0 || c.Malformed != 0 || c.Foreign != 0 {
				t.Errorf("decap counters %+v, want IPIP and GUE decapsulated, nothing dropped", c)
			}
		})
	}
}

// backendNeighbours makes the backend's addresses permanent neighbours of the balancer.
func (l *trafficLab) backendNeighbours(t *testing.T) {
	var mac net.HardwareAddr
	netnstest.In(t, l.backend, func() {
		ifc, err := net.InterfaceByName("srv0p")
		if err != nil {
			t.Fatal(err)
		}
		mac = ifc.HardwareAddr
	})
	netnstest.In(t, l.lb, func() {
		ifc, err := net.InterfaceByName("srv0")
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range trafficBackends {
			n := &netlink.Neigh{LinkIndex: ifc.Index, State: netlink.NUD_PERMANENT, IP: b.AsSlice(), HardwareAddr: mac}
			if err := netlink.NeighSet(n); err != nil {
				t.Fatal(err)
			}
		}
	})
}
