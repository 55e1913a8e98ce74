package nft

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sluicelb/sluice/internal/plan"
)

// dsrTopology builds a DSR path in the test's namespace, which balances: a client namespace
// (10.91.1.2, behind client0 = 10.91.1.1, where Sluice hooks) and one namespace per backend
// (10.91.2.11 behind veth0, 10.91.3.12 behind veth2), each holding the VIP and answering the
// client straight back through the test's namespace, which routes.
func dsrTopology(t *testing.T, vip netip.Addr) (client netns.NsHandle, backends []plan.Backend, nss []netns.NsHandle) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	addVeth := func(name, peer, addr string) {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}
		a, _ := netlink.ParseAddr(addr)
		err := netlink.LinkAdd(veth)
		if err == nil {
			err = netlink.AddrAdd(veth, a)
		}
		if err == nil {
			err = netlink.LinkSetUp(veth)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	addVeth("client0", "client1", "10.91.1.1/24")
	addVeth("veth2", "veth3", "10.91.3.1/24")
	client = moveToNewNetns(t, "client1", "10.91.1.1", "10.91.1.2/24")
	vipAddr := vip.String() + "/32"
	nss = []netns.NsHandle{
		moveToNewNetns(t, "veth1", "10.91.2.1", "10.91.2.11/24", vipAddr),
		moveToNewNetns(t, "veth3", "10.91.3.1", "10.91.3.12/24", vipAddr),
	}
	backends = []plan.Backend{{Addr: backend11}, {Addr: netip.MustParseAddr("10.91.3.12")}}
	return client, backends, nss
}

// serveName answers every connection on l with name, then echoes.
func serveName(l net.Listener, name string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(echoTimeout))
			if _, err := io.WriteString(c, name); err == nil {
				_, _ = io.Copy(c, c)
			}
		}()
	}
}

// nameFrom reads the backend's name from a connection, echoes a ping through it and returns the name.
func nameFrom(c net.Conn) (string, error) {
	_ = c.SetDeadline(time.Now().Add(echoTimeout))
	name := make([]byte, 3)
	if _, err := io.ReadFull(c, name); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		return "", err
	}
	if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
		return "", err
	}
	return string(name), nil
}

// TestKernelDSRReusedPortRebalances: under dsr, the flow map pins a TCP flow to its backend by
// 5-tuple. A new connection that reuses the source port of a flow whose backend has fallen (or
// was removed) must not follow the remembered flow to it: its SYN is balanced anew, to a live
// backend, and its later segments follow the new choice. An established flow keeps its backend.
// (A removed backend's mark maps nowhere, so its flows were re-balanced before the SYN rule too;
// a fallen one's, weighted 0, still maps to it.)
func TestKernelDSRReusedPortRebalances(t *testing.T) {
	for _, change := range []string{"fallen", "removed"} {
		t.Run(change, func(t *testing.T) {
			inFreshNetns(t, func() {
				vip := netip.MustParseAddr("10.91.9.101")
				client, backends, nss := dsrTopology(t, vip)
				listeners := make([]net.Listener, len(nss))
				for i, ns := range nss {
					in(t, ns, func() { listeners[i] = listenTCP(t, ":80") })
					go serveName(listeners[i], []string{"b11", "b12"}[i])
				}
				d := newTestDatapath(t)
				web := service("web", "tcp", vip.String(), 80, 80)
				web.Mode, web.Scheduler, web.Fallback, web.FlowTimeout = "dsr", "maglev", "drop", time.Minute
				web.Backends = []plan.Backend{backends[0], backends[1]}
				web.Backends[0].Weight = 1
				web.Slots = []int{0}
				apply(t, d, &plan.Plan{Datapath: "nft", Interfaces: []string{"client0"}, Services: []plan.Service{web}})

				const reused = 40123
				to := netip.AddrPortFrom(vip, 80).String()
				held, err := dialFrom(t, client, "tcp4", 0, to)
				if err != nil {
					t.Fatal(err)
				}
				first, err := dialFrom(t, client, "tcp4", reused, to)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range []net.Conn{held, first} {
					if name, err := nameFrom(c); name != "b11" || err != nil {
						t.Fatalf("before the change: %q, %v; want b11", name, err)
					}
				}
				// The reused port's connection ends with a reset (no TIME_WAIT on either side), and
				// b11 stops listening: a SYN that reaches it is refused.
				_ = first.(*net.TCPConn).SetLinger(0)
				first.Close()
				listeners[0].Close()

				web.Backends[0].Weight, web.Backends[1].Weight = 0, 1
				web.Slots = []int{1}
				if change == "removed" {
					web.Backends = web.Backends[1:]
					web.Slots = []int{0}
				}
				apply(t, d, &plan.Plan{Datapath: "nft", Interfaces: []string{"client0"}, Services: []plan.Service{web}})
				again, err := dialFrom(t, client, "tcp4", reused, to)
				if errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("a reused port after b11 %s: refused, it followed its remembered flow to b11", change)
				} else if err != nil {
					t.Fatal(err)
				}
				if name, err := nameFrom(again); name != "b12" || err != nil {
					t.Fatalf("a reused port after b11 %s: %q, %v; want b12", change, name, err)
				}
				if change == "fallen" {
					if _, err := held.Write([]byte("ping")); err != nil {
						t.Fatal(err)
					}
					if _, err := io.ReadFull(held, make([]byte, 4)); err != nil {
						t.Fatalf("the established flow of fallen b11: %v", err)
					}
				}
			})
		})
	}
}
