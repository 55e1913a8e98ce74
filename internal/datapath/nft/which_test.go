package nft

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
	"github.com/sluicelb/sluice/internal/testutil"
)

// TestWhichReadsTheRenderedTables: for every service of the golden configs (single ports in the
// hash maps, ranges in the interval maps, every mode and scheduler), lookupService finds the
// service at both ends of its ports and nowhere else, and a new flow's backend as read from the
// slot table (gotos, or dsr marks through the backends map) is the plan's backend of the slot
// flowSlot gives it, with the port the client asked for when the backend has none.
func TestWhichReadsTheRenderedTables(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/golden/*")
	if len(dirs) == 0 {
		t.Fatal("no golden cases")
	}
	for _, dir := range dirs {
		p := loadPlan(t, filepath.Join(dir, "config.yaml"))
		st, err := render(p, testEnv)
		if err != nil {
			t.Fatal(err)
		}
		for i := range p.Services {
			s := &p.Services[i]
			t.Run(filepath.Base(dir)+"/"+s.Name, func(t *testing.T) { checkWhichOf(t, st, s) })
		}
	}
}

func checkWhichOf(t *testing.T, st *state, s *plan.Service) {
	other := map[config.Protocol]config.Protocol{"tcp": "udp", "udp": "tcp"}[s.Protocol]
	var ports []int
	for _, r := range s.Ports {
		ports = append(ports, r.First, r.Last)
	}
	for _, port := range ports {
		vip := netip.AddrPortFrom(s.VIP, uint16(port))
		got, ok := lookupService(st, s.Protocol, vip)
		if !ok || got.name != s.Name || got.mode != s.Mode || got.scheduler != s.Scheduler || got.protocol != s.Protocol {
			t.Fatalf("lookupService(%s %s) = %+v, %v; want service %s", s.Protocol, vip, got, ok, s.Name)
		}
		if got, ok := lookupService(st, other, vip); ok {
			t.Errorf("lookupService(%s %s) = %+v; want none", other, vip, got)
		}
	}
	for _, r := range s.Ports {
		if got, ok := lookupService(st, s.Protocol, netip.AddrPortFrom(s.VIP, uint16(r.Last+1))); ok && got.name == s.Name && !s.Ports.Contains(r.Last+1) {
			t.Errorf("service %s found on port %d, past its ports %s", s.Name, r.Last+1, s.Ports)
		}
	}
	svc, _ := lookupService(st, s.Protocol, netip.AddrPortFrom(s.VIP, uint16(s.Ports.First())))
	client := netip.MustParseAddr("10.91.1.2")
	if s.VIP.Is6() {
		client = netip.MustParseAddr("fd00:91:1::2")
	}
	for i := range 50 {
		src := netip.AddrPortFrom(client, uint16(40000+i))
		r := s.Ports[i%len(s.Ports)]
		vip := netip.AddrPortFrom(s.VIP, uint16(r.First+i%(r.Last-r.First+1)))
		got, err := svc.newFlowBackend(st, src, vip)
		switch {
		case len(s.Slots) == 0 || (s.Scheduler != "maglev" && s.Scheduler != "hash" && s.Scheduler != "sh"):
			if err == nil {
				t.Fatalf("service %s (%s, %d slots) names %s for a new flow; want an error", s.Name, s.Scheduler, len(s.Slots), got)
			}
			return
		case err != nil:
			t.Fatal(err)
		}
		slot := flowSlot(src, vip, len(s.Slots))
		if s.Scheduler == config.SchedulerSH {
			slot = shSlot(src, s.SHPort, len(s.Slots))
		}
		b := s.Backends[s.Slots[slot]]
		want := netip.AddrPortFrom(b.Addr, b.Port)
		if b.Port == 0 {
			want = netip.AddrPortFrom(b.Addr, vip.Port())
		}
		if got != want {
			t.Errorf("%s -> %s: backend %s, want %s", src, vip, got, want)
		}
	}
}

// whichFlows is the number of connections, from distinct source ports, of each kernel Which test.
const whichFlows = 40

// TestKernelWhichNamesTheBackendThatAnswers: for each mode, a maglev service over two backends
// (one namespace each under dsr, two addresses of one under nat and fullnat, each answering its
// own name); for each of whichFlows source ports, Which names the backend of a new flow, a real
// connection from that port reaches it, and Which then reports the tracked flow on the same
// backend (under fullnat with the port it was masqueraded to).
func TestKernelWhichNamesTheBackendThatAnswers(t *testing.T) {
	for _, mode := range []string{"nat", "fullnat", "dsr"} {
		t.Run(mode, func(t *testing.T) {
			inFreshNetns(t, func() {
				vip := netip.MustParseAddr("10.91.9.101")
				var client netns.NsHandle
				var backends []plan.Backend
				names := []string{"b11", "b12"}
				if mode == "dsr" {
					var nss []netns.NsHandle
					client, backends, nss = dsrTopology(t, vip)
					for i, ns := range nss {
						in(t, ns, func() { go serveName(listenTCP(t, ":80"), names[i]) })
					}
				} else {
					var ns netns.NsHandle
					client, ns = natTopology(t)
					backends = []plan.Backend{{Addr: backend11}, {Addr: backend12}}
					in(t, ns, func() {
						for i, b := range backends {
							go serveName(listenTCP(t, netip.AddrPortFrom(b.Addr, 80).String()), names[i])
						}
					})
				}
				web := service("web", "tcp", vip.String(), 80, 80)
				web.Mode, web.Scheduler, web.Fallback, web.FlowTimeout = config.Mode(mode), "maglev", "drop", time.Minute
				web.Backends = backends
				web.Backends[0].Weight, web.Backends[1].Weight = 1, 1
				web.Slots = []int{0, 1, 1, 0, 1, 0, 0}
				d := newTestDatapath(t)
				apply(t, d, &plan.Plan{Datapath: "nft", Interfaces: []string{"client0"}, Services: []plan.Service{web}})

				to := netip.AddrPortFrom(vip, 80)
				reached := map[string]int{}
				for i := range whichFlows {
					src := netip.AddrPortFrom(netip.MustParseAddr("10.91.1.2"), uint16(41000+i))
					before, err := d.Which("tcp", to, src)
					if err != nil || before.Tracked || before.Service != "web" || before.Mode != config.Mode(mode) {
						t.Fatalf("Which before %s connects: %+v, %v; want a new flow of web", src, before, err)
					}
					c, err := dialFrom(t, client, "tcp4", int(src.Port()), to.String())
					if err != nil {
						t.Fatal(err)
					}
					name, err := nameFrom(c)
					if err != nil {
						t.Fatal(err)
					}
					reached[name]++
					if want := netip.AddrPortFrom(backends[slices.Index(names, name)].Addr, 80); before.Backend != want {
						t.Errorf("from %s: Which says %s, the connection reached %s", src, before.Backend, want)
					}
					after, err := d.Which("tcp", to, src)
					if err != nil || !after.Tracked || after.Backend != before.Backend || (mode == "fullnat") != (after.NATPort != 0) {
						t.Errorf("Which after %s connected: %+v, %v; want the tracked flow on %s", src, after, err, before.Backend)
					}
					c.Close()
				}
				if len(reached) != 2 {
					t.Errorf("the connections reached %v, want both backends", reached)
				}
				if _, err := d.Which("udp", to, netip.MustParseAddrPort("10.91.1.2:41000")); err == nil {
					t.Error("Which found a udp service on a tcp port")
				}
			})
		})
	}
}

// accessListed is a service with both access lists: new flows from 10.91.0.0/16 only, none from
// 10.91.1.0/24 (nor its 10.91.1.3/32, which the outer prefix covers).
const accessListed = `services:
  - name: web
    vip: 10.91.9.100
    port: 80
    mode: %s
    source_allow: [10.91.0.0/16]
    source_deny: [10.91.1.3/32, 10.91.1.0/24]
    backends: [{address: 10.91.2.11}]
`

// accessListCases are clients of accessListed and what Which says of each.
var accessListCases = []struct{ src, dropped string }{
	{"10.91.1.3:40000", "source_deny 10.91.1.0/24"},
	{"10.91.1.200:40000", "source_deny 10.91.1.0/24"},
	{"10.92.0.1:40000", "not in source_allow"},
	{"10.91.2.1:40000", ""},
}

// TestWhichReadsTheAccessLists: a client the rendered source_deny or source_allow refuses is
// dropped, naming the list (and the deny prefix), in every mode; any other gets a backend.
func TestWhichReadsTheAccessLists(t *testing.T) {
	for _, mode := range []string{"nat", "fullnat", "dsr"} {
		p := testutil.Plan(t, fmt.Sprintf(accessListed, mode))
		st, err := render(p, testEnv)
		if err != nil {
			t.Fatal(err)
		}
		vip := netip.MustParseAddrPort("10.91.9.100:80")
		svc, ok := lookupService(st, "tcp", vip)
		if !ok {
			t.Fatalf("%s: no service web", mode)
		}
		for _, c := range accessListCases {
			if got := svc.refusal(st, netip.MustParseAddrPort(c.src), vip); got != c.dropped {
				t.Errorf("%s: refusal of %s = %q, want %q", mode, c.src, got, c.dropped)
			}
		}
	}
}

// TestKernelWhichSaysWhatTheAccessListsDrop: Which of a client the kernel's access lists refuse
// names no backend but the list that drops it.
func TestKernelWhichSaysWhatTheAccessListsDrop(t *testing.T) {
	inFreshNetns(t, func() {
		d := newTestDatapath(t)
		apply(t, d, testutil.Plan(t, fmt.Sprintf(accessListed, "nat")))
		vip := netip.MustParseAddrPort("10.91.9.100:80")
		for _, c := range accessListCases {
			got, err := d.Which("tcp", vip, netip.MustParseAddrPort(c.src))
			switch {
			case err != nil:
				t.Errorf("Which(%s): %v", c.src, err)
			case got.Dropped != c.dropped || got.Backend.IsValid() == (c.dropped != ""):
				t.Errorf("Which(%s) = %+v, want dropped %q", c.src, got, c.dropped)
			}
		}
	})
}
