package nft

import (
	"fmt"
	"net/netip"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

// baseOperations bounds what the tables hold for no service in particular: the tables, base
// chains and their rules, the shared sets.
const baseOperations = 100

// kernelBytesPerElement is about what the kernel holds per element or object of Sluice's tables
// (measured on 6.18: slab growth over 10,000 services of 2 backends).
const kernelBytesPerElement = 250

// elements bounds the elements and objects (map elements, chains, rules, counters) the tables
// hold for a plan, without rendering it: a nat or fullnat service takes its dispatch (and
// full-NAT) element, a chain of at most 4 rules, its members and slot maps with their elements,
// and per backend a chain of 2 rules, 2 counters and 1 forwarded element (1 counter and no
// element with nft.packet_counters false); a dsr service its
// flows, marks and new-flow maps and per backend 2 counters and 2 more elements. Persistence
// adds its map, counted full (persistenceSize), and its rules; under nat and fullnat also the
// marks map and live set, with 2 elements and a rule per backend. Protection adds per access list
// its set, counter, rule and prefixes; per limit its counter and rule, and its set (a per-source
// one counted full, sourceSetSize); syn_protection 3 synproxy elements and counters, and the base
// chains of the synproxy once. Second chance adds its map and rule, its map counted full (one
// element per slot).
func elements(p *plan.Plan) int {
	n := baseOperations
	synproxy := false
	for i := range p.Services {
		s := &p.Services[i]
		n += protectionElements(s)
		synproxy = synproxy || s.SYNProtection
		b := len(s.Backends)
		if s.Mode == config.ModeDSR {
			n += 10 + 8*b + len(s.Slots)
			if givesSecondChance(s) {
				n += 4 + len(s.Slots)
			}
		} else {
			n += 9 + 7*b + len(s.Slots)
			if s.Uncounted {
				n -= 2 * b
			}
			if givesSecondChance(s) {
				n += 2 + len(s.Slots)
			}
		}
		switch {
		case s.Persistence == 0:
		case s.Mode == config.ModeDSR:
			n += persistenceSize + 4
		default:
			n += persistenceSize + 8 + 3*b
		}
	}
	if synproxy {
		n += synproxyBaseOperations
	}
	return n
}

// synproxyBaseOperations bounds the synproxy's 4 base chains, 12 maps and 33 rules.
const synproxyBaseOperations = 50

// protectionElements counts what a service's access lists, limits and syn_protection add.
func protectionElements(s *plan.Service) int {
	n := 0
	for _, list := range [][]netip.Prefix{s.SourceAllow, s.SourceDeny} {
		if len(list) > 0 {
			n += 3 + len(list)
		}
	}
	for _, limit := range []struct{ value, set int }{
		{s.Limits.NewConnectionsPerSecond, 0},
		{s.Limits.NewConnectionsPerSourcePerSecond, 1 + sourceSetSize},
		{s.Limits.Connections, 1 + connsSetSize},
		{s.Limits.ConnectionsPerSource, 1 + sourceSetSize},
	} {
		if limit.value > 0 {
			n += 2 + limit.set
		}
	}
	if s.SYNProtection {
		n += 2 * len(synproxyCounts)
	}
	return n
}

// Budget refuses a plan whose tables would hold more than nft.max_elements elements and
// objects (see elements).
func (d *Datapath) Budget(p *plan.Plan) error {
	limit := p.NFTMaxElements
	if limit == 0 {
		limit = config.DefaultNFTMaxElements
	}
	need := elements(p)
	if need <= limit {
		return nil
	}
	return &datapath.BudgetError{
		Field: "nft.max_elements", What: "nftables elements and objects", Need: need, Limit: limit,
		Cost: fmt.Sprintf("about %d MB of kernel memory", need*kernelBytesPerElement>>20),
		Instead: "use smaller Maglev tables (table_size; the default on nft is 61 slots up to 3 backends), " +
			"fewer services or fewer with persistence (each reserves a map of 65535 clients), datapath: ebpf (a Maglev slot is 4 bytes of a BPF array there), " +
			"or raise nft.max_elements if the machine has the memory",
	}
}
