package nft

import (
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// TableName is the name of the table Sluice owns in the inet family (nat, fullnat) and in the
// netdev family (dsr). Nothing else is touched.
const TableName = "sluice"

// hashSeed seeds jhash; every node must use the same one so that a flow hashes alike everywhere.
const hashSeed = "0x51ce"

// dsrPriority runs DSR before anything else on the ingress device.
const dsrPriority = "-500"

// forwardedPriority counts nat and fullnat packets after both nat hooks, once they are leaving.
const forwardedPriority = knftables.SNATPriority + " + 10"

// Environment is what rendering needs to know about the machine.
type Environment struct {
	// DSRDevices are the devices DSR traffic arrives on.
	DSRDevices []string
	// DeviceTo returns the device leading to a backend.
	DeviceTo func(netip.Addr) (string, error)
}

// family helpers for one IP version.
type ipv struct {
	ip       string // "ip" or "ip6"
	addrType string // "ipv4_addr" or "ipv6_addr"
	suffix   string // "4" or "6"
}

var (
	ipv4 = ipv{"ip", "ipv4_addr", "4"}
	ipv6 = ipv{"ip6", "ipv6_addr", "6"}
)

func ipvOf(a netip.Addr) ipv {
	if a.Is6() {
		return ipv6
	}
	return ipv4
}

// renderBase lays out what does not belong to one service: the tables, their base chains and
// the sets that every service adds elements to.
func renderBase(p *plan.Plan, env Environment) (*state, error) {
	st := newState()
	used := sharedUseOf(p)
	renderInetBase(st, used)
	if slices.ContainsFunc(p.Services, func(s plan.Service) bool { return countsForwarded(&s) }) {
		renderForwarded(st, used)
	}
	if slices.ContainsFunc(p.Services, func(s plan.Service) bool { return s.Mode == config.ModeDSR }) {
		if err := renderNetdevBase(st, env.DSRDevices, used); err != nil {
			return nil, err
		}
	}
	renderProtectionBase(st, p, used)
	return st, nil
}

// sharedUse is the shared sets and maps that hold elements, by family. The base chains look up
// only those: every rule of a base chain costs each packet that reaches it, so a config with no
// port range, no IPv6 or no UDP service has no rule for them (the sets stay, empty).
type sharedUse map[knftables.Family]map[sharedObject]bool

func (u sharedUse) has(f knftables.Family, o sharedObject) bool { return u[f][o] }

func (u sharedUse) add(f knftables.Family, o sharedObject) {
	if u[f] == nil {
		u[f] = map[sharedObject]bool{}
	}
	u[f][o] = true
}

// sharedUseOf is the shared sets and maps the plan's services put elements in: those renderService
// fills (TestSharedUseIsWhatServicesFill holds the two together).
func sharedUseOf(p *plan.Plan) sharedUse {
	u := sharedUse{}
	for i := range p.Services {
		s := &p.Services[i]
		for _, ports := range s.Ports {
			u.addService(s, ports.IsRange())
		}
	}
	return u
}

// addService adds the shared objects a service's entries of one kind (single ports or port
// ranges) go in.
func (u sharedUse) addService(s *plan.Service, ranged bool) {
	v, proto := ipvOf(s.VIP), string(s.Protocol)
	if s.Mode == config.ModeDSR {
		u.add(knftables.NetDevFamily, sharedObject{kind: dispatchKind, v: v, ranged: ranged})
		return
	}
	const f = knftables.InetFamily
	u.add(f, sharedObject{kind: dispatchKind, v: v, ranged: ranged})
	if len(s.Backends) > 0 && countsForwarded(s) { // a counter per backend
		u.add(f, sharedObject{forwardedKind, proto, v, ranged})
	}
	if s.Mode == config.ModeFullNAT {
		u.add(f, sharedObject{fullNATKindOf(s), proto, v, ranged})
	}
	if s.SYNProtection {
		for _, c := range synproxyCounts {
			u.add(f, sharedObject{c.shared, proto, v, ranged})
		}
	}
}

// renderService renders one service's objects, and its elements of the base's sets, in two
// stages: its protection (protect.go: access lists, limits, syn_protection), whose rules judge its
// new flows, then its mode's chains and maps, which put those rules where new flows pass.
func renderService(s *plan.Service, env Environment) (*state, error) {
	if s.Scheduler.CountsConnections() || slices.ContainsFunc(s.Backends, func(b plan.Backend) bool { return b.MaxConns > 0 }) {
		// The config refuses them for datapath nft: nothing here counts a backend's connections.
		return nil, fmt.Errorf("service %s: %s scheduling and max_connections need datapath ebpf", s.Name, s.Scheduler)
	}
	st := newState()
	guard, err := renderProtection(st, s)
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", s.Name, err)
	}
	if s.Mode != config.ModeDSR {
		renderNATService(st, s, guard)
		return st, nil
	}
	if err := renderDSRService(st, s, guard, env); err != nil {
		return nil, fmt.Errorf("service %s: %w", s.Name, err)
	}
	return st, nil
}

// renderInetBase lays out the inet table: dispatch verdict maps keyed by proto . vip . port, the
// nat hooks that consult those that are used, the maps of full-NAT services whose flows are
// translated to their own source (fullnat_source) and the sets of those whose flows are
// masqueraded. The nat postrouting chain stays, even empty: the kernel's nat hooks are
// registered with the first nat chain, and its postrouting hook undoes a reply's DNAT.
func renderInetBase(st *state, used sharedUse) {
	const f = knftables.InetFamily
	st.tables[f] = true
	var pre, post []string
	for _, v := range []ipv{ipv4, ipv6} {
		for i, m := range dispatchMaps(v) {
			st.addSet(f, m)
			if used.has(f, sharedObject{kind: dispatchKind, v: v, ranged: i == 1}) {
				pre = append(pre, fmt.Sprintf("meta l4proto . %s daddr . th dport vmap @%s", v.ip, m.Name))
			}
		}
		for _, proto := range []string{"tcp", "udp"} {
			for i, m := range snatMaps(proto, v) {
				st.addSet(f, m)
				if used.has(f, sharedObject{snatKind, proto, v, i == 1}) {
					post = append(post, fmt.Sprintf("meta l4proto %s snat %s to ct original %s daddr . ct original proto-dst map @%s", proto, v.ip, v.ip, m.Name))
				}
			}
			for i, set := range fullNATSets(proto, v) {
				st.addSet(f, set)
				if used.has(f, sharedObject{fullNATKind, proto, v, i == 1}) {
					post = append(post, fmt.Sprintf("meta l4proto %s ct original %s daddr . ct original proto-dst @%s masquerade", proto, v.ip, set.Name))
				}
			}
		}
	}
	st.addChain(baseChain(f, preroutingChain, knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority), pre...)
	st.addChain(baseChain(f, outputChain, knftables.NATType, knftables.OutputHook, knftables.DNATPriority), pre...)
	st.addChain(baseChain(f, postroutingChain, knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority), post...)
}

// fullNATSets hold the vip . ports of the full-NAT services of one protocol and IP version: a
// hash set for single-port services, an interval set for port ranges (see dispatchMaps).
func fullNATSets(proto string, v ipv) [2]*knftables.Set {
	typ := v.addrType + " . inet_service"
	return [2]*knftables.Set{
		{Name: sharedObject{fullNATKind, proto, v, false}.String(), Type: typ},
		{Name: sharedObject{fullNATKind, proto, v, true}.String(), Type: typ, Flags: []knftables.SetFlag{knftables.IntervalFlag}},
	}
}

// snatMaps map the vip . ports of the full-NAT services of one protocol and IP version that
// have a fullnat_source to that source address, as fullNATSets hold the others.
func snatMaps(proto string, v ipv) [2]*knftables.Map {
	typ := v.addrType + " . inet_service : " + v.addrType
	return [2]*knftables.Map{
		{Name: sharedObject{snatKind, proto, v, false}.String(), Type: typ},
		{Name: sharedObject{snatKind, proto, v, true}.String(), Type: typ, Flags: []knftables.SetFlag{knftables.IntervalFlag}},
	}
}

// fullNATKindOf is the kind of the shared set or map a full-NAT service's element goes to: the
// snat map when it has a fullnat_source, else the masqueraded set.
func fullNATKindOf(s *plan.Service) sharedKind {
	if s.FullNATSource.IsValid() {
		return snatKind
	}
	return fullNATKind
}

// renderForwarded counts every packet forwarded from a client to a backend of a nat or fullnat
// service: a filter chain after the nat hooks looks the flow's service up in its conntrack entry
// (original destination) and its backend in the packet (the destination DNAT wrote), in maps of
// per-backend counters. The backend comes from the packet, not from the entry's reply tuple:
// that is another cache line of the entry, a miss per packet in a large table, which cost a
// fifth of the nat path's rate per core. Reply packets and flows Sluice did not balance (no
// element: a client talking to a backend directly) are not counted. One rule per map in use (nft 1.0.6 types ct proto-dst only after a protocol
// match, so protocols cannot share one).
func renderForwarded(st *state, used sharedUse) {
	const f = knftables.InetFamily
	var rules []string
	for _, v := range []ipv{ipv4, ipv6} {
		for _, proto := range []string{"tcp", "udp"} {
			for i, m := range forwardedMaps(proto, v) {
				st.addSet(f, m)
				if !used.has(f, sharedObject{forwardedKind, proto, v, i == 1}) {
					continue
				}
				rules = append(rules, fmt.Sprintf("meta l4proto %s ct direction original counter name ct original %s daddr . ct original proto-dst . %s daddr . th dport map @%s",
					proto, v.ip, v.ip, m.Name))
			}
		}
	}
	st.addChain(baseChain(f, forwardedChain, knftables.FilterType, knftables.PostroutingHook, forwardedPriority), rules...)
}

// countsForwarded tells whether the forwarded chain counts a service's packets: nat and fullnat
// services unless nft.packet_counters is false (dsr counts in its backend chains).
func countsForwarded(s *plan.Service) bool { return s.Mode != config.ModeDSR && !s.Uncounted }

// forwardedMaps map the conntrack tuple parts of one protocol and IP version's flows to the
// packet counter of their backend: a hash map for the flows of single-port services, looked up in
// constant time whatever the number of services, and an interval map for those of port ranges.
func forwardedMaps(proto string, v ipv) [2]*knftables.Map {
	typ := fmt.Sprintf("%[1]s . inet_service . %[1]s . inet_service : counter", v.addrType)
	return [2]*knftables.Map{
		{Name: sharedObject{forwardedKind, proto, v, false}.String(), Type: typ},
		{Name: sharedObject{forwardedKind, proto, v, true}.String(), Type: typ, Flags: []knftables.SetFlag{knftables.IntervalFlag}},
	}
}

// renderNetdevBase lays out the netdev table: an ingress chain per DSR device dispatching by
// proto . vip . port.
func renderNetdevBase(st *state, devices []string, used sharedUse) error {
	if len(devices) == 0 {
		return fmt.Errorf("dsr needs at least one ingress interface")
	}
	const f = knftables.NetDevFamily
	st.tables[f] = true
	// A frame for another host's MAC (a switch flooding unknown unicast, as it does once the node
	// that held the MAC is gone) is the stack's to drop: balancing it would duplicate another
	// balancer's packets.
	rules := []string{"meta pkttype != host accept"}
	for _, v := range []ipv{ipv4, ipv6} {
		for i, m := range dispatchMaps(v) {
			st.addSet(f, m)
			if !used.has(f, sharedObject{kind: dispatchKind, v: v, ranged: i == 1}) {
				continue
			}
			rules = append(rules, fmt.Sprintf("meta protocol %s meta l4proto . %s daddr . th dport vmap @%s", v.ip, v.ip, m.Name))
		}
	}
	for _, dev := range devices {
		c := baseChain(f, ingressChain(dev), knftables.FilterType, knftables.IngressHook, dsrPriority)
		c.Device = ptr(dev)
		st.addChain(c, rules...)
	}
	return nil
}

// dispatchMaps send the packets of one IP version to their service chain by proto . vip . port:
// a hash map for single-port services, looked up in constant time whatever the number of
// services, and an interval map for port ranges (a pipapo set, whose lookup grows with its
// elements), which holds nothing unless a service has a range.
func dispatchMaps(v ipv) [2]*knftables.Map {
	typ := "inet_proto . " + v.addrType + " . inet_service : verdict"
	return [2]*knftables.Map{
		{Name: sharedObject{kind: dispatchKind, v: v}.String(), Type: typ},
		{Name: sharedObject{kind: dispatchKind, v: v, ranged: true}.String(), Type: typ, Flags: []knftables.SetFlag{knftables.IntervalFlag}},
	}
}

// rangeIndex picks, of a pair of shared maps, the one an entry of a service's ports goes in: 0
// (an exact match) for a single port, 1 (an interval map) for a range.
func rangeIndex(ports config.Range) int {
	if ports.IsRange() {
		return 1
	}
	return 0
}

// addPortElements adds one element per entry of the service's ports to the one of the pair of
// shared maps that takes it: element makes each from the entry's text.
func addPortElements[O knftables.Object](st *state, f knftables.Family, s *plan.Service, pair [2]O, element func(ports string) *knftables.Element) {
	for _, ports := range s.Ports {
		st.shared(f, pair[rangeIndex(ports)]).add(element(ports.String()))
	}
}

// baseChain is a chain on a hook. Its name ends with a hash of its rules (set by addChain):
// reconcile compares chains by name, so rules that change make a new chain, which replaces the
// old one in the same transaction.
func baseChain(f knftables.Family, name string, t knftables.BaseChainType, hook knftables.BaseChainHook, prio knftables.BaseChainPriority) *knftables.Chain {
	return &knftables.Chain{Family: f, Name: name, Type: &t, Hook: &hook, Priority: &prio, Policy: ptr(knftables.AcceptPolicy)}
}

// describe is the service with all its ports, as its names hash it.
func describe(s *plan.Service) string { return describePorts(s, s.Ports.String()) }

// describePorts is the service as recorded in the kernel (the comment of its element for one
// entry of its ports, in the dispatch map and the others keyed by port), enough for `sluice list`
// and Which to show it without the config: "web tcp 10.91.9.100 80 nat maglev", then its options:
// "sh_port" when sh hashes the source port too, "persist/24" with the prefix of persistence (at
// most 120 bytes: nft keeps 128). The elements of a service on several ports differ by the entry.
func describePorts(s *plan.Service, ports string) string {
	fields := []string{s.Name, string(s.Protocol), s.VIP.String(), ports, string(s.Mode), string(s.Scheduler)}
	if s.SHPort {
		fields = append(fields, shPortOption)
	}
	if s.Persistence > 0 {
		fields = append(fields, persistOption+strconv.Itoa(s.PersistencePrefix))
	}
	return strings.Join(fields, " ")
}

// The options that end a service's description.
const (
	shPortOption  = "sh_port"  // sh hashes the source port too
	persistOption = "persist/" // persistence, by this prefix length
)

// selector is the expression that picks a slot for a new flow.
func selector(s *plan.Service) string {
	v := ipvOf(s.VIP)
	n := len(s.Slots)
	switch s.Scheduler {
	case config.SchedulerRR, config.SchedulerWRR:
		return fmt.Sprintf("numgen inc mod %d", n)
	case config.SchedulerRandom:
		return fmt.Sprintf("numgen random mod %d", n)
	case config.SchedulerSH: // the client's address (and port), as IPVS sh: see shSlot
		if s.SHPort {
			return fmt.Sprintf("jhash %s saddr . %s sport mod %d seed %s", v.ip, s.Protocol, n, hashSeed)
		}
		return fmt.Sprintf("jhash %s saddr mod %d seed %s", v.ip, n, hashSeed)
	default: // maglev, hash: the 5-tuple, so a reused source port lands where its old flow did
		return fmt.Sprintf("jhash %s saddr . %s sport . %s daddr . %s dport mod %d seed %s", v.ip, s.Protocol, v.ip, s.Protocol, n, hashSeed)
	}
}

// persistenceSize bounds a persistence map: one element per client (or client prefix) that opened
// a flow within the timeout, as the DSR flow map and nftlb's maps. About 16 MB of kernel memory
// when full (kernelBytesPerElement); a client that finds it full is balanced without being
// remembered until elements expire. The budget counts every service's map as full.
const persistenceSize = 65535

// persistence is what a service with persistence adds to its chain: a dynamic map from the
// client's key (its source address masked to the persistence prefix) to the mark of its backend,
// whose elements live for the persistence timeout after the client's last new flow.
type persistence struct{ key, set string }

// renderPersistence adds the service's persistence map.
func renderPersistence(st *state, f knftables.Family, s *plan.Service, n serviceNames) persistence {
	v := ipvOf(s.VIP)
	st.addSet(f, &knftables.Map{
		Name: n.persist, TypeOf: v.ip + " saddr : meta mark",
		Flags: []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag}, Timeout: &s.Persistence, Size: ptr(uint64(persistenceSize)),
	})
	key := v.ip + " saddr"
	if bits := s.VIP.BitLen(); s.PersistencePrefix < bits {
		key += " & " + net.IP(net.CIDRMask(s.PersistencePrefix, bits)).String()
	}
	return persistence{key: key, set: n.persist}
}

// forget drops a client's element when its mark is not in live (the marks of the backends that
// take new flows): an update never changes a known value, so the client is then balanced anew
// and remembered with its new backend.
func (p persistence) forget(live string) string {
	return fmt.Sprintf("meta mark set %s map @%s meta mark != @%s delete @%s { %s : meta mark }", p.key, p.set, live, p.set, p.key)
}

// recall sets the mark of a remembered client whose backend takes new flows, and refreshes its
// element; the rule goes on to send the flow there.
func (p persistence) recall(live string) string {
	return fmt.Sprintf("meta mark set %s map @%s meta mark @%s update @%s { %s : meta mark }", p.key, p.set, live, p.set, p.key)
}

// remember records the client with the backend whose mark the packet carries. A rule of its
// own: an update that fails (the map full) ends its rule, and the flow must still be sent.
func (p persistence) remember() string {
	return fmt.Sprintf("update @%s { %s : meta mark }", p.set, p.key)
}

// commonService adds what every mode shares: the dispatch element and the members map, which
// records each backend's weight in the kernel (value) so a listing needs no config.
func commonService(st *state, f knftables.Family, s *plan.Service, n serviceNames) {
	v := ipvOf(s.VIP)
	addPortElements(st, f, s, dispatchMaps(v), func(ports string) *knftables.Element {
		return &knftables.Element{Key: []string{string(s.Protocol), s.VIP.String(), ports}, Value: []string{gotoVerdict(n.chain)}, Comment: ptr(describePorts(s, ports))}
	})
	members := st.addSet(f, &knftables.Map{Name: n.members, Type: v.addrType + " . inet_service : mark"})
	for _, b := range s.Backends {
		members.add(&knftables.Element{Key: []string{b.Addr.String(), strconv.Itoa(int(b.Port))}, Value: []string{strconv.Itoa(b.Weight)}})
		st.addCounter(f, counterName(chainCounter, s.Name, b.ID()))
	}
}

// renderNATService renders a nat or fullnat service's chains and maps; guard judges new flows
// first, once the conntrack timeout policy is set.
func renderNATService(st *state, s *plan.Service, guard []string) {
	const f = knftables.InetFamily
	n := namesOf(s)
	v := ipvOf(s.VIP)
	commonService(st, f, s, n)
	switch {
	case s.Mode != config.ModeFullNAT:
	case s.FullNATSource.IsValid():
		addPortElements(st, f, s, snatMaps(string(s.Protocol), v), func(ports string) *knftables.Element {
			return &knftables.Element{Key: []string{s.VIP.String(), ports}, Value: []string{s.FullNATSource.String()}, Comment: ptr(describePorts(s, ports))}
		})
	default:
		addPortElements(st, f, s, fullNATSets(string(s.Protocol), v), func(ports string) *knftables.Element {
			return &knftables.Element{Key: []string{s.VIP.String(), ports}, Comment: ptr(describePorts(s, ports))}
		})
	}
	rules := append(newFlowRules(s), guard...)
	variant, first := "", []string(nil)
	switch {
	case s.Persistence > 0:
		variant, first = markCleared, []string{"meta mark set 0"}
		rules = append(rules, natPersistenceRules(st, s, n)...)
	case len(s.Slots) > 0:
		slots := st.addSet(f, maglevTable(n.slots, "verdict", len(s.Slots)))
		for slot, bi := range s.Slots {
			slots.add(&knftables.Element{Key: []string{strconv.Itoa(slot)}, Value: []string{gotoVerdict(backendChain(s.Name, string(s.Protocol), s.Backends[bi].ID(), ""))}})
		}
		if givesSecondChance(s) {
			rules = append(rules, renderSecondChance(st, s, n))
		}
		rules = append(rules, fmt.Sprintf("meta l4proto %s %s vmap @%s", s.Protocol, selector(s), n.slots))
	}
	rules = append(rules, fallbackRule(s))
	st.addChain(&knftables.Chain{Family: f, Name: n.chain}, rules...)
	for _, b := range s.Backends {
		to := b.Addr.String()
		if b.Port != 0 {
			to = netip.AddrPortFrom(b.Addr, b.Port).String()
		}
		st.addChain(&knftables.Chain{Family: f, Name: backendChain(s.Name, string(s.Protocol), b.ID(), variant)},
			append(first,
				fmt.Sprintf("counter name %q", counterName(chainCounter, s.Name, b.ID())),
				fmt.Sprintf("meta l4proto %s dnat %s to %s", s.Protocol, v.ip, to))...)
		if countsForwarded(s) {
			packets := counterName(packetCounter, s.Name, b.ID())
			st.addCounter(f, packets)
			addPortElements(st, f, s, forwardedMaps(string(s.Protocol), v), func(ports string) *knftables.Element {
				return forwardedElement(s.VIP, ports, b, packets)
			})
		}
	}
}

// maglevTable is a service's Maglev table, slot : value. Its size is the slot count, which its name
// fixes: the kernel then keeps it in a fixed hash table hashing one word (nft_hash_fast), which
// a new flow looks up faster than the resizable table (rhash) of a map without a size.
func maglevTable(name, value string, slots int) *knftables.Map {
	return &knftables.Map{Name: name, TypeOf: "numgen inc mod 2 : " + value, Size: ptr(uint64(slots))}
}

// natPersistenceRules add the objects of a nat or fullnat service with persistence and return its
// chain's rules: as under dsr, the slots hold backend marks and the marks map sends a mark to its
// backend's chain, so that the remembered and the chosen backend pass through the packet mark
// (nft 1.0.6 cannot look a map's value up in another map without a register). The backend chains
// clear the mark: the first packet of a flow to such a service leaves with mark 0.
func natPersistenceRules(st *state, s *plan.Service, n serviceNames) []string {
	const f = knftables.InetFamily
	p := renderPersistence(st, f, s, n)
	marks := backendMarks(s.Backends)
	backends := st.addSet(f, &knftables.Map{Name: n.marks, Type: "mark : verdict"})
	live := st.addSet(f, &knftables.Set{Name: n.live, Type: "mark"})
	for i, b := range s.Backends {
		mark := strconv.FormatUint(uint64(marks[i]), 10)
		backends.add(&knftables.Element{Key: []string{mark}, Value: []string{gotoVerdict(backendChain(s.Name, string(s.Protocol), b.ID(), markCleared))}})
	}
	rules := []string{p.forget(n.live), fmt.Sprintf("%s meta mark vmap @%s", p.recall(n.live), n.marks)}
	if len(s.Slots) == 0 {
		return rules
	}
	slots := st.addSet(f, maglevTable(n.slots, "meta mark", len(s.Slots)))
	for slot, bi := range s.Slots {
		mark := strconv.FormatUint(uint64(marks[bi]), 10)
		slots.add(&knftables.Element{Key: []string{strconv.Itoa(slot)}, Value: []string{mark}})
		live.add(&knftables.Element{Key: []string{mark}})
	}
	return append(rules,
		fmt.Sprintf("meta l4proto %s meta mark set %s map @%s", s.Protocol, selector(s), n.slots),
		p.remember(),
		fmt.Sprintf("meta mark vmap @%s", n.marks))
}

// forwardedElement keys a backend's packet counter by the conntrack tuple parts of its flows:
// vip . service ports . backend . backend port (the client's port when the backend has none).
// Its comment repeats the key, which nft lists unreadably when it holds a port range.
func forwardedElement(vip netip.Addr, ports string, b plan.Backend, counter string) *knftables.Element {
	backendPorts := ports
	if b.Port != 0 {
		backendPorts = strconv.Itoa(int(b.Port))
	}
	key := []string{vip.String(), ports, b.Addr.String(), backendPorts}
	return &knftables.Element{Key: key, Value: []string{counter}, Comment: ptr(strings.Join(key, " . "))}
}

func fallbackRule(s *plan.Service) string {
	switch {
	case s.Fallback == config.FallbackReject && s.Protocol == config.ProtocolTCP:
		return "reject with tcp reset"
	case s.Fallback == config.FallbackReject:
		return "reject"
	default:
		return "drop"
	}
}

// renderDSRService hashes new flows to a backend mark, remembers flow -> mark in a dynamic map
// (DSR has no conntrack) and forwards to the backend's MAC, keeping the VIP as destination; guard
// judges the new flows, once the known ones have gone to their backends.
func renderDSRService(st *state, s *plan.Service, guard []string, env Environment) error {
	const f = knftables.NetDevFamily
	n := namesOf(s)
	v := ipvOf(s.VIP)
	commonService(st, f, s, n)
	marks := backendMarks(s.Backends)
	flowKey, keyType := dsrFlowKey(s)
	st.addSet(f, &knftables.Map{
		Name: n.flows, TypeOf: keyType + " : meta mark",
		Flags: []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag}, Timeout: &s.FlowTimeout, Size: ptr(uint64(65535)),
	})
	backends := st.addSet(f, &knftables.Map{Name: n.marks, Type: "mark : verdict"})
	// The new-flow counters of the backends that take new flows: only those are in the map, so it
	// also tells a live backend's mark.
	newFlows := st.addSet(f, &knftables.Map{Name: n.newFlows, Type: "mark : counter"})
	takesNew := make([]bool, len(s.Backends))
	for _, bi := range s.Slots {
		takesNew[bi] = true
	}
	var rules []string
	if s.Protocol == config.ProtocolTCP {
		// A SYN whose flow is remembered for a backend that takes no new flow (fallen, removed)
		// forgets it, so that a reused source port is balanced anew, as on the ebpf datapath: an
		// update from the packet path never changes a known value. Only then: every element
		// deleted lingers until the set's garbage collection, and a port reused faster than that
		// would fill its hash bucket until inserts fail.
		rules = append(rules, fmt.Sprintf("tcp flags & (syn | ack) == syn meta mark set %s map @%s meta mark != @%s delete @%s { %s : meta mark }",
			flowKey, n.flows, n.newFlows, n.flows, flowKey))
		// A SYN that keeps its remembered backend starts a connection all the same: it is counted
		// as a new flow, as the new-flow rule below counts the others.
		rules = append(rules, fmt.Sprintf("tcp flags & (syn | ack) == syn meta mark set %s map @%s counter name meta mark map @%s",
			flowKey, n.flows, n.newFlows))
	}
	// A known flow refreshes its entry (the timeout is an idle timeout) and goes to its backend.
	rules = append(rules, fmt.Sprintf("meta l4proto %s meta mark set %s map @%s update @%s { %s : meta mark } meta mark vmap @%s",
		s.Protocol, flowKey, n.flows, n.flows, flowKey, n.marks))
	// Only new flows go on: the access lists and limits judge them.
	rules = append(rules, guard...)
	var p *persistence
	if s.Persistence > 0 {
		// A new flow of a remembered client goes to its backend if that takes new flows (the
		// new-flow map holds the marks of those), and is remembered as a flow like the others.
		// Remembering the flow is a rule of its own: an update into a full flow map ends its rule,
		// and the flow must still go on (unremembered) rather than fall to the drop below.
		p = ptr(renderPersistence(st, f, s, n))
		rules = append(rules, p.forget(n.newFlows),
			fmt.Sprintf("%s update @%s { %s : meta mark }", p.recall(n.newFlows), n.flows, flowKey),
			fmt.Sprintf("%s counter name meta mark map @%s meta mark vmap @%s", p.recall(n.newFlows), n.newFlows, n.marks))
	}
	for i, b := range s.Backends {
		dev, err := env.DeviceTo(b.Addr)
		if err != nil {
			return fmt.Errorf("backend %s: %w", b.ID(), err)
		}
		chain := backendChain(s.Name, string(s.Protocol), b.ID(), dev)
		mark := strconv.FormatUint(uint64(marks[i]), 10)
		backends.add(&knftables.Element{Key: []string{mark}, Value: []string{gotoVerdict(chain)}})
		newFlowsCounter := counterName(newFlowCounter, s.Name, b.ID())
		st.addCounter(f, newFlowsCounter)
		if takesNew[i] {
			newFlows.add(&knftables.Element{Key: []string{mark}, Value: []string{newFlowsCounter}})
		}
		st.addChain(&knftables.Chain{Family: f, Name: chain},
			fmt.Sprintf("counter name %q", counterName(chainCounter, s.Name, b.ID())),
			fmt.Sprintf("fwd %s to %s device %q", v.ip, b.Addr, dev))
	}
	if len(s.Slots) > 0 {
		slots := st.addSet(f, maglevTable(n.slots, "meta mark", len(s.Slots)))
		for slot, bi := range s.Slots {
			slots.add(&knftables.Element{Key: []string{strconv.Itoa(slot)}, Value: []string{strconv.FormatUint(uint64(marks[bi]), 10)}})
		}
		// Two rules, not one: nft 1.0.6 runs out of registers for an IPv6 flow key in a single rule.
		// Only new flows get here, so this is where they are counted.
		if givesSecondChance(s) {
			rules = append(rules, renderDSRSecondChance(st, s, n, flowKey)...)
		}
		rules = append(rules, fmt.Sprintf("meta l4proto %s meta mark set %s map @%s", s.Protocol, selector(s), n.slots))
		if p != nil {
			rules = append(rules, "meta mark != 0 "+p.remember())
		}
		// Two rules, so that a full flow map (a flood of new flows fills it) does not drop the
		// new flows it cannot remember: they still go to their backend.
		rules = append(rules,
			fmt.Sprintf("meta mark != 0 update @%s { %s : meta mark }", n.flows, flowKey),
			fmt.Sprintf("meta mark != 0 counter name meta mark map @%s meta mark vmap @%s", n.newFlows, n.marks))
	}
	rules = append(rules, "drop")
	st.addChain(&knftables.Chain{Family: f, Name: n.chain}, rules...)
	return nil
}

// dsrFlowKey is the key of a dsr service's flow map, as the rules compute it and as its type
// declares it. IPv4: the client's address and port and the VIP's port. IPv6: a 32-bit jhash of
// those (seed flowKeySeed), because nft 1.0.6 (Debian 12) cannot update a map whose key holds an
// IPv6 address from the packet path with a value: its register allocation aborts, or with the
// address last writes the mark over a word of it (fixed in nft 1.0.9). Two IPv6 flows whose keys
// hash alike share an entry, so the later one follows the earlier one's backend (with 65,535
// flows remembered, one new flow in 65,000): a flow never changes backend because of it.
func dsrFlowKey(s *plan.Service) (key, typeOf string) {
	if s.VIP.Is4() {
		key = fmt.Sprintf("ip saddr . %s sport . %s dport", s.Protocol, s.Protocol)
		return key, key
	}
	return fmt.Sprintf("jhash ip6 saddr . %s sport . %s dport mod %d seed %#x", s.Protocol, s.Protocol, uint64(flowKeyModulus), flowKeySeed), "numgen inc mod 2"
}

// backendMarks gives each backend a non-zero mark derived from its identity (FNV-1a of its ID), so
// a DSR flow remembered by mark keeps its backend while others are added or removed. Unless two
// IDs hash alike (about n²/2³³ for n backends: one in a million services of 90 backends): the
// later in plan order then takes the next free mark, which changes when the earlier one goes, and
// its remembered flows go with the mark. Only stored marks would rule that out; rendering reads
// no state, and the odds do not pay for it.
func backendMarks(backends []plan.Backend) []uint32 {
	marks := make([]uint32, len(backends))
	used := map[uint32]bool{0: true}
	for i, b := range backends {
		h := fnv.New32a()
		h.Write([]byte(b.ID()))
		m := h.Sum32()
		for used[m] {
			m++
		}
		used[m] = true
		marks[i] = m
	}
	return marks
}

func ptr[T any](v T) *T { return &v }
