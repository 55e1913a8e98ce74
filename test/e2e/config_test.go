package e2e

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/sluicelb/sluice/internal/lab"
)

// Flavor is one datapath and forwarding mode the suite runs against. Everything the suite knows
// about how a datapath behaves lives here, so another datapath (ebpf) reuses the suite by adding
// flavors.
type Flavor struct {
	Name     string // subtest name
	Datapath string // the config's datapath
	Mode     string // every service's mode
	// ChurnSchedulers are the schedulers whose churn run must show no failure and no stall;
	// ChurnObserved are run and reported only.
	ChurnSchedulers, ChurnObserved []string
	// KeepsFlowsOfRemovedBackends: an established flow survives removing its backend from the
	// config (conntrack keeps the DNAT). DSR keeps flows in an nft map of flow -> backend mark,
	// and a backend removed from the config loses its mark's mapping, so its flows end.
	KeepsFlowsOfRemovedBackends bool
	// KeepsFlowsOfRemovedServices: an established flow survives removing its whole service
	// from the config, as it does with IPVS (conntrack keeps the DNAT; the ebpf datapath keeps
	// the service's entries, retired, for its flows). The nft DSR chain and flow map go with
	// the service.
	KeepsFlowsOfRemovedServices bool
	// RepliesBypassBalancer: backends answer the client directly (DSR), so replies arrive on
	// the client's bypass leg instead of through the balancer.
	RepliesBypassBalancer bool
	// DrainWaitsForIdle: the datapath cannot see a flow end (the nft DSR flow map keeps no TCP
	// state), so a drain with a held flow ends at its timeout, not when the flow closes.
	DrainWaitsForIdle bool
}

// Flavors of the nft datapath.
var nftFlavors = []Flavor{
	{
		Name: "nat", Datapath: "nft", Mode: "nat",
		ChurnSchedulers: []string{"maglev", "hash"}, ChurnObserved: []string{"rr"},
		KeepsFlowsOfRemovedBackends: true, KeepsFlowsOfRemovedServices: true,
	},
	{
		Name: "fullnat", Datapath: "nft", Mode: "fullnat",
		ChurnSchedulers:             []string{"maglev", "hash"},
		KeepsFlowsOfRemovedBackends: true, KeepsFlowsOfRemovedServices: true,
	},
	{
		Name: "dsr", Datapath: "nft", Mode: "dsr",
		ChurnSchedulers:       []string{"maglev", "hash"},
		RepliesBypassBalancer: true, DrainWaitsForIdle: true,
	},
}

// Flavors of the ebpf datapath: its own flow table pins flows by 5-tuple, but a SYN picks afresh,
// so a reused source port re-balances; removed backends stay valid for their established flows.
var ebpfFlavors = []Flavor{
	{
		Name: "nat", Datapath: "ebpf", Mode: "nat",
		ChurnSchedulers:             []string{"maglev", "hash"},
		KeepsFlowsOfRemovedBackends: true, KeepsFlowsOfRemovedServices: true,
	},
	{
		Name: "fullnat", Datapath: "ebpf", Mode: "fullnat",
		ChurnSchedulers:             []string{"maglev", "hash"},
		KeepsFlowsOfRemovedBackends: true, KeepsFlowsOfRemovedServices: true,
	},
	{
		Name: "dsr", Datapath: "ebpf", Mode: "dsr",
		ChurnSchedulers:             []string{"maglev", "hash"},
		KeepsFlowsOfRemovedBackends: true, KeepsFlowsOfRemovedServices: true, RepliesBypassBalancer: true,
	},
}

// Service is one service of a rendered config.
type Service struct {
	Name      string
	VIP       netip.Addr
	Port      uint16
	Protocol  string // "" is tcp
	Scheduler string // "" is maglev
	Backends  []Backend
	// Extra is YAML added to the service as is, one "key: value" per line (e.g. a health_check).
	Extra []string
}

// Backend is one backend of a rendered config. Address is text so that tests can write invalid
// ones.
type Backend struct {
	Address string
	Weight  int
	// Extra is YAML added to the backend as is, one "key: value" per line (e.g. max_connections).
	Extra []string
}

// Addr is the service's VIP and port as a client dials it.
func (s Service) Addr() netip.AddrPort { return netip.AddrPortFrom(s.VIP, s.Port) }

// Config renders a complete config: the flavor's datapath, every service in the flavor's mode.
func (f Flavor) Config(services ...Service) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# rendered by the e2e suite, flavor %s\ndatapath: %s\nservices:\n", f.Name, f.Datapath)
	for _, s := range services {
		proto, sched := cmp.Or(s.Protocol, "tcp"), cmp.Or(s.Scheduler, "maglev")
		fmt.Fprintf(&b, "  - name: %s\n    vip: %s\n    port: %d\n    protocol: %s\n    mode: %s\n    scheduler: %s\n    backends:\n",
			s.Name, s.VIP, s.Port, proto, f.Mode, sched)
		for _, be := range s.Backends {
			fmt.Fprintf(&b, "      - address: %s\n        weight: %d\n", be.Address, be.Weight)
			for _, line := range be.Extra {
				fmt.Fprintf(&b, "        %s\n", line)
			}
		}
		for _, line := range s.Extra {
			fmt.Fprintf(&b, "    %s\n", line)
		}
	}
	return b.String()
}

// pool is a backend list over lab backends: index -> weight, in index order.
func pool(v6 bool, weights map[int]int) []Backend {
	var out []Backend
	for _, i := range slices.Sorted(maps.Keys(weights)) {
		out = append(out, Backend{Address: theLab.BackendAddr(i, v6).String(), Weight: weights[i]})
	}
	return out
}

// equalPool gives each of the lab's backends weight 1.
func equalPool(v6 bool) []Backend {
	w := map[int]int{}
	for i := 1; i <= labBackends; i++ {
		w[i] = 1
	}
	return pool(v6, w)
}

// The suite's services: the lab's demo VIPs.
func webService(scheduler string, backends []Backend) Service {
	return Service{Name: "web", VIP: netip.MustParseAddr(lab.VIP4), Port: 80, Scheduler: scheduler, Backends: backends}
}

func web6Service(backends []Backend) Service {
	return Service{Name: "web6", VIP: netip.MustParseAddr(lab.VIP6), Port: 80, Backends: backends}
}

func dnsService(backends []Backend) Service {
	return Service{Name: "dns", VIP: netip.MustParseAddr(lab.VIP4), Port: 5353, Protocol: "udp", Backends: backends}
}
