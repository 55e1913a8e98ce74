package nft

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

// sourceSetSize bounds a service's per-source sets (new-connection rate, connection count): one
// element per client address seen recently (rate) or holding a connection (count). A client that
// finds the set full is not limited by it until elements go: the rule's update fails and the rule
// does not match (nft's dynamic sets fail open). The budget counts every such set as full.
const sourceSetSize = 65535

// sourceRateTimeout is how long a client's rate element outlives its last new connection: a
// bucket of burst = rate tokens is full again after a second, so forgetting it later loses nothing.
const sourceRateTimeout = 10 * time.Second

// connsSetSize bounds the set holding a service's connection count: its one key, the VIP.
const connsSetSize = 1

// synproxyMSS is the MSS the synproxy announces to clients for IPv4 and IPv6 (Ethernet's 1500 MTU).
var synproxyMSS = map[string]int{"ip": 1460, "ip6": 1440}

// protectionName names a service's protection object of kind k. The access lists and counters
// keep their names (hash of the IP version) whatever else changes, so that a list changes by
// element adds and deletes and counters keep counting; a per-source or count set's name also
// hashes its limit, which its elements carry: a new limit starts a new set (and count).
func protectionName(s *plan.Service, k serviceKind, limit int) string {
	parts := []string{ipvOf(s.VIP).ip}
	if limit != 0 {
		parts = append(parts, strconv.Itoa(limit))
	}
	return serviceObject{kind: k, service: s.Name, hash: hash8(parts...)}.String()
}

// Protection is a stage of rendering of its own: renderProtectionBase adds the synproxy's base
// chains and maps to the base (render.go's renderBase); renderProtection renders a service's
// access lists, limits and synproxy elements, and returns the rules that judge its new flows,
// which the service's mode (render.go) puts in its chain. testdata/golden/*/protection.nft hold
// what this stage alone renders of each golden config.

// renderProtectionBase adds the synproxy's chains and maps when a service of p has syn_protection.
func renderProtectionBase(st *state, p *plan.Plan, used sharedUse) {
	if slices.ContainsFunc(p.Services, func(s plan.Service) bool { return s.SYNProtection }) {
		renderSynproxyBase(st, used)
	}
}

// renderProtection adds what guards a service's new flows and returns the rules that judge them
// (see protectionRules); it refuses what the service's mode cannot program (checkProtection).
func renderProtection(st *state, s *plan.Service) ([]string, error) {
	if err := checkProtection(s); err != nil {
		return nil, err
	}
	if s.SYNProtection {
		renderSynproxyService(st, s)
	}
	return protectionRules(st, familyOf(s), s), nil
}

// checkProtection refuses what the family of a service's mode cannot program (the config refuses
// it first): connection counts need conntrack, which dsr's netdev chains have not; so does the
// synproxy, for tcp only.
func checkProtection(s *plan.Service) error {
	switch {
	case s.Mode == config.ModeDSR && (s.Limits.Connections > 0 || s.Limits.ConnectionsPerSource > 0):
		return fmt.Errorf("limits connections and connections_per_source need conntrack, which mode dsr has not on the nft datapath (use nat or fullnat, or datapath ebpf)")
	case s.SYNProtection && (s.Mode == config.ModeDSR || s.Protocol != config.ProtocolTCP):
		return fmt.Errorf("syn_protection needs a tcp service in mode nat or fullnat")
	}
	return nil
}

// protectionRules adds a service's access lists and limits and returns the rules that judge its
// new flows, in order: the deny list, the allow list, the new-connection rates, then the
// connection counts, last so that they only count connections that are let through. Each rule
// counts what it refuses in a named counter.
func protectionRules(st *state, f knftables.Family, s *plan.Service) []string {
	v := ipvOf(s.VIP)
	var rules []string
	refuse := func(k serviceKind, match string) {
		counter := refusalCounter(s.Name, s.VIP, k)
		st.addCounter(f, counter)
		verdict := "drop"
		if s.LimitAction == config.LimitReset && s.Protocol == config.ProtocolTCP && k != denyList && k != allowList {
			verdict = "reject with tcp reset"
		}
		rules = append(rules, fmt.Sprintf("%s counter name %q %s", match, counter, verdict))
	}
	for _, list := range []struct {
		kind     serviceKind
		prefixes []netip.Prefix
		op       string
	}{{denyList, s.SourceDeny, ""}, {allowList, s.SourceAllow, "!= "}} {
		if len(list.prefixes) == 0 {
			continue
		}
		name := protectionName(s, list.kind, 0)
		set := st.addSet(f, &knftables.Set{Name: name, TypeOf: v.ip + " saddr", Flags: []knftables.SetFlag{knftables.IntervalFlag}})
		for _, p := range outermost(list.prefixes) {
			// The comment says the key: reading an interval back gives its start and end.
			set.add(&knftables.Element{Key: []string{p.String()}, Comment: ptr(p.String())})
		}
		refuse(list.kind, fmt.Sprintf("%s saddr %s@%s", v.ip, list.op, name))
	}
	l := s.Limits
	if n := l.NewConnectionsPerSecond; n > 0 {
		refuse(rateLimit, fmt.Sprintf("limit rate over %d/second burst %d packets", n, n))
	}
	if n := l.NewConnectionsPerSourcePerSecond; n > 0 {
		name := protectionName(s, srcRateLimit, n)
		st.addSet(f, &knftables.Set{
			Name: name, TypeOf: v.ip + " saddr", Size: ptr(uint64(sourceSetSize)),
			Flags: []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag}, Timeout: ptr(sourceRateTimeout),
		})
		refuse(srcRateLimit, fmt.Sprintf("update @%s { %s saddr limit rate over %d/second burst %d packets }", name, v.ip, n, n))
	}
	for _, count := range []struct {
		kind        serviceKind
		limit, size int
		key         string
	}{{srcConnLimit, l.ConnectionsPerSource, sourceSetSize, "saddr"}, {connsLimit, l.Connections, connsSetSize, "daddr"}} {
		if count.limit == 0 {
			continue
		}
		name := protectionName(s, count.kind, count.limit)
		st.addSet(f, &knftables.Set{
			Name: name, TypeOf: v.ip + " " + count.key, Size: ptr(uint64(count.size)), Flags: []knftables.SetFlag{knftables.DynamicFlag},
		})
		refuse(count.kind, fmt.Sprintf("update @%s { %s %s ct count over %d }", name, v.ip, count.key, count.limit))
	}
	return rules
}

// refusalCounter names the counter of what a service's access list or limit of kind k refuses.
func refusalCounter(service string, vip netip.Addr, k serviceKind) string {
	return protectionName(&plan.Service{Name: service, VIP: vip}, k, 0)
}

// protectionPackets reads the packets of a service's protection counter of kind k (0 if it has none).
func protectionPackets(st *state, f knftables.Family, service string, vip netip.Addr, k serviceKind) uint64 {
	if c := st.counters[objKey{f, refusalCounter(service, vip, k)}]; c != nil {
		return deref(c.Packets)
	}
	return 0
}

// refusals reads a service's refusal counters (zero where it has no such list or limit): each
// counts the packets its rule refused, the first packet of each refused flow and its retries.
func refusals(st *state, f knftables.Family, service string, vip netip.Addr) datapath.Refusals {
	n := func(k serviceKind) uint64 { return protectionPackets(st, f, service, vip, k) }
	return datapath.Refusals{
		SourceList:                       n(denyList) + n(allowList),
		ConnectionsPerSource:             n(srcConnLimit),
		Connections:                      n(connsLimit),
		NewConnectionsPerSourcePerSecond: n(srcRateLimit),
		NewConnectionsPerSecond:          n(rateLimit),
	}
}

// outermost drops the prefixes of a list that another one covers: they add nothing, and an
// interval set refuses overlapping elements. Sorted by address, shorter first, a covered prefix
// follows the last one kept, which covers it.
func outermost(prefixes []netip.Prefix) []netip.Prefix {
	sorted := slices.Clone(prefixes)
	slices.SortFunc(sorted, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []netip.Prefix
	for _, p := range sorted {
		if len(out) == 0 || !out[len(out)-1].Contains(p.Addr()) {
			out = append(out, p)
		}
	}
	return out
}

// protectionTag is what a service's chain name hashes of its protection: only when it has some,
// so that the names of the services without stay as they were.
func protectionTag(s *plan.Service) []string {
	if len(s.SourceAllow) == 0 && len(s.SourceDeny) == 0 && s.Limits == (config.Limits{}) {
		return nil
	}
	l := s.Limits
	return []string{
		strconv.FormatBool(len(s.SourceAllow) > 0), strconv.FormatBool(len(s.SourceDeny) > 0),
		strconv.Itoa(l.NewConnectionsPerSecond), strconv.Itoa(l.NewConnectionsPerSourcePerSecond),
		strconv.Itoa(l.Connections), strconv.Itoa(l.ConnectionsPerSource), string(s.LimitAction),
	}
}

// synproxyCounts are the synproxy's shared maps: each maps the vip . port of the tcp services of
// one IP version with syn_protection to one of their counters.
var synproxyCounts = []struct {
	shared  sharedKind
	counter serviceKind
}{{synproxyKind, synCounter}, {cookieAckKind, cookieAcks}, {cookieOKKind, cookiesOK}}

// renderSynproxyBase lays out the SYN protection of the inet table, as the nftables wiki and
// nftlb do it: a raw prerouting chain counts the SYNs to the protected services and takes them
// out of conntrack; the input and forward chains count the invalid (untracked) ACKs of those
// services and hand them and the untracked SYNs to the kernel's synproxy, which answers a SYN
// with a cookie and, on an ACK that returns a valid one, sends the SYN on through the output
// hook, where the nat chains balance it as any new flow; what else of theirs is invalid is
// dropped. The raw output chain counts the SYNs the synproxy sends (those without a socket).
// Conntrack must not pick an ACK up as a connection (checkSynproxySysctl).
//
// The synproxy announces no TCP timestamps, and so no window scaling or SACK, which its cookie
// would carry in the timestamp: with timestamps, the ACK it sends a backend to open the
// connection echoes the backend's timestamp shifted twice by its own offset, and recent kernels
// (TcpExtTSEcrRejected, 6.18 here) ignore that ACK, so that a connection opens only when the client
// sends data, and one whose server speaks first waits a second for a SYN-ACK retransmit.
func renderSynproxyBase(st *state, used sharedUse) {
	const f = knftables.InetFamily
	var notrack, guard []string
	output := []string{"tcp flags & (syn | ack) == syn meta skuid 0-4294967295 return"} // a local socket's SYN
	for _, v := range []ipv{ipv4, ipv6} {
		key := fmt.Sprintf("%s daddr . tcp dport", v.ip)
		for _, ranged := range []bool{false, true} {
			syns, acks, ok := synproxyMap(v, synproxyKind, ranged), synproxyMap(v, cookieAckKind, ranged), synproxyMap(v, cookieOKKind, ranged)
			st.addSet(f, syns)
			st.addSet(f, acks)
			st.addSet(f, ok)
			if !used.has(f, sharedObject{synproxyKind, "tcp", v, ranged}) {
				continue
			}
			notrack = append(notrack, fmt.Sprintf("tcp flags & (syn | ack) == syn counter name %s map @%s notrack", key, syns.Name))
			guard = append(guard,
				fmt.Sprintf("tcp flags & (syn | ack) == ack ct state invalid,untracked counter name %s map @%s", key, acks.Name),
				fmt.Sprintf("%s @%s ct state invalid,untracked counter synproxy mss %d", key, syns.Name, synproxyMSS[v.ip]),
				fmt.Sprintf("%s @%s ct state invalid counter drop", key, syns.Name))
			output = append(output, fmt.Sprintf("tcp flags & (syn | ack) == syn counter name %s map @%s", key, ok.Name))
		}
	}
	st.addChain(baseChain(f, notrackChain, knftables.FilterType, knftables.PreroutingHook, knftables.RawPriority), notrack...)
	st.addChain(baseChain(f, synproxyInputChain, knftables.FilterType, knftables.InputHook, knftables.FilterPriority), guard...)
	st.addChain(baseChain(f, synproxyForwardChain, knftables.FilterType, knftables.ForwardHook, knftables.FilterPriority), guard...)
	st.addChain(baseChain(f, synproxyOutputChain, knftables.FilterType, knftables.OutputHook, knftables.RawPriority), output...)
}

// synproxyMap is the synproxy's map of one kind (synproxyCounts) for the single-port services of
// one IP version, or its interval map for port ranges.
func synproxyMap(v ipv, kind sharedKind, ranged bool) *knftables.Map {
	m := &knftables.Map{Name: sharedObject{kind, "tcp", v, ranged}.String(), Type: v.addrType + " . inet_service : counter"}
	if ranged {
		m.Flags = []knftables.SetFlag{knftables.IntervalFlag}
	}
	return m
}

// renderSynproxyService adds a service with syn_protection to the synproxy's maps, with its counters.
func renderSynproxyService(st *state, s *plan.Service) {
	const f = knftables.InetFamily
	for _, c := range synproxyCounts {
		counter := protectionName(s, c.counter, 0)
		st.addCounter(f, counter)
		v := ipvOf(s.VIP)
		pair := [2]*knftables.Map{synproxyMap(v, c.shared, false), synproxyMap(v, c.shared, true)}
		addPortElements(st, f, s, pair, func(ports string) *knftables.Element {
			return &knftables.Element{Key: []string{s.VIP.String(), ports}, Value: []string{counter}, Comment: ptr(describePorts(s, ports))}
		})
	}
}

// synCookies reads a service's synproxy counters (zero without syn_protection). Rejected is what
// the synproxy was handed and did not pass on: an ACK whose cookie did not check out, or a stray
// one; a retransmitted ACK the synproxy passes on again counts twice as validated.
func synCookies(st *state, service string, vip netip.Addr) datapath.SYNCookies {
	n := func(k serviceKind) uint64 { return protectionPackets(st, knftables.InetFamily, service, vip, k) }
	c := datapath.SYNCookies{Sent: n(synCounter), Validated: n(cookiesOK)}
	if acks := n(cookieAcks); acks > c.Validated {
		c.Rejected = acks - c.Validated
	}
	return c
}

// tcpLoose is the sysctl that lets conntrack take a mid-stream packet for a new connection.
const tcpLoose = "net.netfilter.nf_conntrack_tcp_loose"

// checkSynproxySysctl refuses syn_protection while conntrack picks connections up mid-stream
// (nf_conntrack_tcp_loose=1, the kernel's default): the handshake's last ACK would then start a
// connection balanced as such, never reaching the synproxy, and the backend would reset it. The
// setting belongs to the network namespace; the datapath does not change it for the operator.
func checkSynproxySysctl(p *plan.Plan) error {
	for i := range p.Services {
		if !p.Services[i].SYNProtection {
			continue
		}
		loose, err := datapath.ReadSysctl(tcpLoose)
		if err != nil {
			return fmt.Errorf("service %s: syn_protection: %w (is nf_conntrack loaded?)", p.Services[i].Name, err)
		}
		if loose != 0 {
			return fmt.Errorf("service %s: syn_protection needs sysctl net.netfilter.nf_conntrack_tcp_loose=0 in the balancer's network namespace, or conntrack takes the handshake's last ACK for a connection and the synproxy never checks its cookie (sysctl -w net.netfilter.nf_conntrack_tcp_loose=0)", p.Services[i].Name)
		}
		return nil
	}
	return nil
}
