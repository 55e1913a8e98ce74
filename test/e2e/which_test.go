package e2e

import (
	"encoding/json"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
)

// whichFlowsPerService is the number of source ports each service of TestWhichNFT is asked about.
const whichFlowsPerService = 60

// whichPortFirst is the first client port TestWhichNFT uses, below the ephemeral range so that
// no connection of another test left a flow from it; each service takes the next
// whichFlowsPerService.
const whichPortFirst = 26000

// TestWhichNFT: on the nft datapath, in nat and dsr, `sluice which` names the backend a real
// flow from the same source port then reaches, for TCP (HTTP) and UDP services over IPv4 and IPv6:
// the kernel's jhash, slot table and backend as Which reads them. Every fifth flow is asked about
// again once it ran, and must be tracked on that backend.
func TestWhichNFT(t *testing.T) {
	requireLab(t)
	t.Cleanup(func() { flush(t) })
	for _, f := range nftFlavors {
		if f.Mode == "fullnat" {
			continue // the same tables as nat; only the masquerading differs
		}
		t.Run(f.Name, func(t *testing.T) {
			services := []Service{webService("maglev", equalPool(false)), dnsService(equalPool(false)), web6Service(equalPool(true)),
				Service{Name: "dns6", VIP: netip.MustParseAddr(lab.VIP6), Port: 5353, Protocol: "udp", Backends: equalPool(true)}}
			applyFresh(t, f.Config(services...))
			for i, svc := range services {
				first := whichPortFirst + i*whichFlowsPerService
				t.Run(svc.Name, func(t *testing.T) { checkWhich(t, svc, first) })
			}
		})
	}
}

// whichAnswer is what `sluice which -o json` prints.
type whichAnswer struct {
	Service string `json:"service"`
	Backend string `json:"backend"`
	Tracked bool   `json:"tracked"`
}

// checkWhich asks about whichFlowsPerService flows from ports first.. and runs each.
func checkWhich(t *testing.T, svc Service, first int) {
	v6 := svc.VIP.Is6()
	client := theLab.ClientAddr(v6)
	proto := svc.Protocol
	if proto == "" {
		proto = "tcp"
	}
	which := func(port int) whichAnswer {
		var a whichAnswer
		out := mustSluice(t, "which", "-o", "json", "-p", proto, svc.Addr().String(), netip.AddrPortFrom(client, uint16(port)).String())
		if err := json.Unmarshal([]byte(out), &a); err != nil || a.Service != svc.Name {
			t.Fatalf("sluice which: %v, %s: want service %s", err, out, svc.Name)
		}
		return a
	}
	reached, untracked := map[string]int{}, 0
	for port := first; port < first+whichFlowsPerService; port++ {
		before := which(port)
		if !before.Tracked {
			untracked++
		}
		var name string
		err := inClient(func() (err error) {
			if proto == "udp" {
				name, err = udpFrom(svc.Addr(), port)
			} else {
				name, err = httpFrom(svc.Addr(), port)
			}
			return err
		})
		if err != nil {
			t.Fatalf("from port %d: %v", port, err)
		}
		reached[name]++
		want := netip.AddrPortFrom(theLab.BackendAddr(backendIndex(name), v6), svc.Port).String()
		// A flow an earlier test left tracked (a TCP connection in TIME_WAIT) answers for its
		// own late segments; a new connection from its port is balanced anew.
		if !before.Tracked && before.Backend != want {
			t.Errorf("from port %d: sluice which says %s, the flow reached %s (%s)", port, before.Backend, want, name)
		}
		if (port-first)%5 == 0 {
			if after := which(port); !after.Tracked || after.Backend != want {
				t.Errorf("from port %d after the flow: %+v, want it tracked on %s", port, after, want)
			}
		}
	}
	t.Logf("%s: %d flows (%d new to the balancer when asked), reaching %v", svc.Name, whichFlowsPerService, untracked, reached)
	if len(reached) != labBackends {
		t.Errorf("the flows reached %v, want all %d backends", reached, labBackends)
	}
}

// udpFrom is udpOnce from a given local port (0: the kernel picks one).
func udpFrom(to netip.AddrPort, localPort int) (string, error) {
	c, err := net.DialUDP("udp", &net.UDPAddr{Port: localPort}, net.UDPAddrFromAddrPort(to))
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(udpTimeout)); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte("q")); err != nil {
		return "", err
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return backendOf(string(buf[:n]))
}
