package cttable

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/netnstest"
	"github.com/sluicelb/sluice/internal/testutil"
)

// A bulk transfer through a translated connection goes on when another balancer takes it over
// from the copy the resync wrote there, and again when the first one takes it back after its own
// entry saw none of the packets meanwhile. The sequence numbers have moved past the windows that
// entry knew: before ImportFlows refreshed it, or when the refresh did not make its window
// tracking liberal, the kernel dropped the transfer's packets there as out of window and it
// stalled for good (each checked by taking the change out).
func TestTakenOverTransferGoesOn(t *testing.T) {
	if _, err := exec.LookPath("nft"); err != nil {
		testutil.Missing(t, "needs nft: %v", err)
	}
	r := newTakeoverRig(t)
	received := r.transfer(t)
	progress := func(what string) {
		t.Helper()
		mark := received.Load()
		testutil.Eventually(t, what, func() bool { return received.Load() > mark+32<<20 })
	}
	progress("the transfer through balancer 1")

	if n := resync(t, r.lb[0], r.lb[1]); n != 1 {
		t.Fatalf("balancer 2 took in %d entries of balancer 1's, want the transfer's", n)
	}
	r.via(t, 1)
	progress("the transfer through balancer 2, from the copy the resync wrote")
	// Balancer 1's entry sees no packet now: once it has been idle for two of the whole seconds
	// idle times are counted in, balancer 2's record is the more recent for sure.
	time.Sleep(2500 * time.Millisecond)

	if n := resync(t, r.lb[1], r.lb[0]); n != 1 {
		t.Fatalf("balancer 1 refreshed %d of its entries from balancer 2's, want the transfer's", n)
	}
	r.via(t, 0)
	progress("the transfer back through balancer 1, its own entry refreshed")
}

// resync writes from's conntrack table into to's, as a node's resync does, and returns how many
// entries to took in.
func resync(t *testing.T, from, to netns.NsHandle) int {
	t.Helper()
	var records []datapath.ReplicatedFlow
	netnstest.In(t, from, func() {
		table, err := New(nil)
		must(t, err)
		defer table.Close()
		must(t, table.SnapshotFlows(context.Background(), func(f datapath.ReplicatedFlow) bool {
			records = append(records, f)
			return true
		}))
	})
	var res datapath.ImportResult
	netnstest.In(t, to, func() {
		table, err := New(nil)
		must(t, err)
		defer table.Close()
		res, err = table.ImportFlows(context.Background(), records)
		must(t, err)
	})
	return res.Imported
}

// takeoverRig is a client and a backend joined by two balancers that translate the VIP to the
// backend alike; the routes of both ends choose the balancer, as a VRRP address would.
type takeoverRig struct {
	client, backend netns.NsHandle
	lb              [2]netns.NsHandle
}

var (
	takeoverClient  = netip.MustParseAddr("10.79.1.2")
	takeoverFront   = netip.MustParseAddr("10.79.1.1") // each balancer's, toward the client
	takeoverBack    = netip.MustParseAddr("10.79.2.1") // each balancer's, toward the backend
	takeoverBackend = netip.MustParseAddr("10.79.2.2")
	takeoverVIP     = netip.MustParseAddrPort("10.79.9.9:80")
)

func newTakeoverRig(t *testing.T) *takeoverRig {
	t.Helper()
	r := &takeoverRig{client: netnstest.New(t), backend: netnstest.New(t), lb: [2]netns.NsHandle{netnstest.New(t), netnstest.New(t)}}
	host := func(a netip.Addr) []netip.Prefix { return []netip.Prefix{netip.PrefixFrom(a, 32)} }
	for i, lb := range r.lb {
		n := string(rune('1' + i))
		clientAddrs := host(takeoverClient)
		if i > 0 {
			clientAddrs = nil // the client's address is on its first link; it leaves by either
		}
		netnstest.Link(t, r.client, netnstest.End{Name: "c" + n, Addrs: clientAddrs}, lb, netnstest.End{Name: "front", Addrs: host(takeoverFront)})
		backendAddrs := host(takeoverBackend)
		if i > 0 {
			backendAddrs = nil
		}
		netnstest.Link(t, r.backend, netnstest.End{Name: "b" + n, Addrs: backendAddrs}, lb, netnstest.End{Name: "back", Addrs: host(takeoverBack)})
		netnstest.In(t, lb, func() {
			route(t, "front", takeoverClient, netip.Addr{})
			route(t, "back", takeoverBackend, netip.Addr{})
			must(t, os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644))
			nft := exec.Command("nft", "-f", "-")
			nft.Stdin = strings.NewReader("table ip t {\n chain pre {\n type nat hook prerouting priority -100\n ip daddr " +
				takeoverVIP.Addr().String() + " tcp dport 80 dnat to " + takeoverBackend.String() + ":80\n }\n}\n")
			if out, err := nft.CombinedOutput(); err != nil {
				t.Fatalf("nft: %v: %s", err, out)
			}
		})
	}
	r.via(t, 0)
	return r
}

// via routes the client's and the backend's packets through balancer i.
func (r *takeoverRig) via(t *testing.T, i int) {
	t.Helper()
	n := string(rune('1' + i))
	netnstest.In(t, r.client, func() { route(t, "c"+n, takeoverVIP.Addr(), takeoverFront) })
	netnstest.In(t, r.backend, func() { route(t, "b"+n, takeoverClient, takeoverBack) })
}

// route routes to dst over link, through gw when it is valid (on the link whatever its address).
func route(t *testing.T, link string, dst, gw netip.Addr) {
	t.Helper()
	l, err := netlink.LinkByName(link)
	must(t, err)
	rt := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: dst.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if gw.IsValid() {
		rt.Gw, rt.Flags = gw.AsSlice(), int(netlink.FLAG_ONLINK)
	}
	must(t, netlink.RouteReplace(rt))
}

// transfer starts a bulk transfer from the backend to the client through the VIP, which runs
// until the test ends, and returns the count of bytes the client received.
func (r *takeoverRig) transfer(t *testing.T) *atomic.Int64 {
	t.Helper()
	var ln net.Listener
	netnstest.In(t, r.backend, func() {
		var err error
		ln, err = net.Listen("tcp", ":80")
		must(t, err)
	})
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		chunk := make([]byte, 64<<10)
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	var c net.Conn
	netnstest.In(t, r.client, func() {
		var err error
		c, err = net.DialTimeout("tcp", takeoverVIP.String(), 5*time.Second)
		must(t, err)
	})
	t.Cleanup(func() { c.Close() })
	received := new(atomic.Int64)
	go func() {
		buf := make([]byte, 256<<10)
		for {
			n, err := c.Read(buf)
			received.Add(int64(n))
			if err != nil {
				return // the test ended, or the transfer broke: it makes no more progress
			}
			// A reader a little slower than the sender keeps a full window in flight: the
			// segments past what a window-tracking entry without the window scale allows.
			time.Sleep(500 * time.Microsecond)
		}
	}()
	return received
}
