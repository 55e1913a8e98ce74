package nft

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/sluicelb/sluice/internal/plan"
)

// The names of Sluice's objects in its tables, formatted and parsed here only: listing, Which,
// Flows and reconciling read the kernel's tables back without the config, by these names.

// The base chains, one per hook; addChain ends each name with a hash of its rules.
const (
	preroutingChain  = "prerouting"
	outputChain      = "output"
	postroutingChain = "postrouting"
	forwardedChain   = "forwarded"
	ingressPrefix    = "ingress-" // netdev: one per DSR device, "ingress-eth0"

	// syn_protection (protect.go): SYNs out of conntrack, then to the synproxy.
	notrackChain         = "notrack"
	synproxyInputChain   = "synproxy-input"
	synproxyForwardChain = "synproxy-forward"
	synproxyOutputChain  = "synproxy-output"
)

// ingressChain is the name of the DSR ingress chain of a device.
func ingressChain(device string) string { return ingressPrefix + device }

// sharedKind is the kind of a set or map that every service of one IP version adds elements to.
type sharedKind string

// The kinds of shared sets and maps.
const (
	dispatchKind  sharedKind = "dispatch"  // proto . vip . port : goto the service chain
	fullNATKind   sharedKind = "fullnat"   // vip . port of the full-NAT services of a protocol that masquerade
	snatKind      sharedKind = "snat"      // vip . port of the full-NAT services with a fullnat_source : that source
	forwardedKind sharedKind = "forwarded" // conntrack tuple parts of a protocol : packet counter
	synproxyKind  sharedKind = "synproxy"  // vip . port of the tcp services with syn_protection : SYN counter
	cookieAckKind sharedKind = "cookieack" // the same : counter of the ACKs handed to the synproxy
	cookieOKKind  sharedKind = "cookieok"  // the same : counter of the SYNs the synproxy sent on a valid cookie
)

// sharedObject names a shared set or map: "dispatch-port4", "fullnat-range-udp6",
// "forwarded-port-tcp4". Each kind has a hash set or map for single-port services and an interval
// one for port ranges.
type sharedObject struct {
	kind   sharedKind
	proto  string // "tcp" or "udp"; none for dispatch maps, which hold both
	v      ipv
	ranged bool
}

func (o sharedObject) String() string {
	ports := "port"
	if o.ranged {
		ports = "range"
	}
	if o.kind == dispatchKind {
		return string(o.kind) + "-" + ports + o.v.suffix
	}
	return string(o.kind) + "-" + ports + "-" + o.proto + o.v.suffix
}

// parseSharedObject takes a shared set's or map's name apart; ok is false for any other name.
func parseSharedObject(name string) (o sharedObject, ok bool) {
	kind, rest, ok := strings.Cut(name, "-")
	if !ok {
		return sharedObject{}, false
	}
	o.kind = sharedKind(kind)
	switch {
	case strings.HasPrefix(rest, "port"):
		rest = rest[len("port"):]
	case strings.HasPrefix(rest, "range"):
		rest, o.ranged = rest[len("range"):], true
	default:
		return sharedObject{}, false
	}
	switch o.kind {
	case dispatchKind:
	case fullNATKind, snatKind, forwardedKind, synproxyKind, cookieAckKind, cookieOKKind:
		if rest, ok = strings.CutPrefix(rest, "-"); !ok || len(rest) != len("tcp4") {
			return sharedObject{}, false
		}
		if o.proto, rest = rest[:3], rest[3:]; o.proto != "tcp" && o.proto != "udp" {
			return sharedObject{}, false
		}
	default:
		return sharedObject{}, false
	}
	switch rest {
	case ipv4.suffix:
		o.v = ipv4
	case ipv6.suffix:
		o.v = ipv6
	default:
		return sharedObject{}, false
	}
	return o, true
}

// isShared tells whether name is a shared set or map of that kind.
func isShared(name string, kind sharedKind) bool {
	o, ok := parseSharedObject(name)
	return ok && o.kind == kind
}

// serviceKind is the kind of an object rendered for one service.
type serviceKind string

// The kinds of a service's objects.
const (
	serviceChain  serviceKind = "svc"      // the service chain, where the dispatch map goes
	slotsMap      serviceKind = "slots"    // slot : backend chain (dsr: backend mark)
	prevMap       serviceKind = "prev"     // second chance: slot : the backend chain it had before a change, for flow_timeout
	membersMap    serviceKind = "members"  // backend . port : weight, so a listing needs no config
	flowsMap      serviceKind = "flows"    // dsr: flow : backend mark, written by the packet path
	marksMap      serviceKind = "backends" // dsr: backend mark : backend chain
	newFlowsMap   serviceKind = "newflows" // dsr: backend mark : new-flow counter
	persistMap    serviceKind = "persist"  // persistence: client key : backend mark, written by the packet path
	liveSet       serviceKind = "live"     // nat, fullnat persistence: the marks of backends taking new flows
	backendChains serviceKind = "be"       // one backend's chain; hash of protocol and backend

	// Each backend has two named counters (hash of the backend), told apart by kind. The backend
	// chain's own counter sees the first packet of each flow under nat and fullnat (the nat hooks
	// see nothing else) and every packet under dsr; the second counts what the first cannot see.
	chainCounter   serviceKind = "c" // in the backend chain
	packetCounter  serviceKind = "p" // nat, fullnat: every packet sent to the backend, from the forwarded chain
	newFlowCounter serviceKind = "n" // dsr: the first packet of each flow, from the service chain

	// Protection (protect.go): a set and a counter of the packets refused by each access list and
	// limit, of the same kind; the counter of the SYNs answered with a cookie.
	denyList     serviceKind = "deny"      // source_deny: an interval set of client prefixes
	allowList    serviceKind = "allow"     // source_allow: an interval set of client prefixes
	rateLimit    serviceKind = "rate"      // new_connections_per_second: no set, a limit statement
	srcRateLimit serviceKind = "srcrate"   // new_connections_per_source_per_second: client : its rate, written by the packet path
	connsLimit   serviceKind = "conns"     // connections: vip : its connection count, written by the packet path
	srcConnLimit serviceKind = "srcconns"  // connections_per_source: client : its connection count, written by the packet path
	synCounter   serviceKind = "syn"       // syn_protection: SYNs answered with a cookie
	cookieAcks   serviceKind = "cookieack" // syn_protection: ACKs handed to the synproxy
	cookiesOK    serviceKind = "cookieok"  // syn_protection: SYNs the synproxy sent on a valid cookie
)

var serviceKinds = []serviceKind{serviceChain, slotsMap, prevMap, membersMap, flowsMap, marksMap, newFlowsMap,
	persistMap, liveSet, backendChains, chainCounter, packetCounter, newFlowCounter,
	denyList, allowList, rateLimit, srcRateLimit, connsLimit, srcConnLimit, synCounter, cookieAcks, cookiesOK}

// serviceObject names an object of one service: "<kind>-<service>-<hash>", and a DSR backend
// chain also "-<hash of its device>": "svc-web-8c2c44ca", "be-web-8c2c44ca-1a2b".
type serviceObject struct {
	kind    serviceKind
	service string
	hash    string // 8 hex digits
	device  string // 4 hex digits, dsr backend chains only
}

func (o serviceObject) String() string {
	name := string(o.kind) + "-" + o.service + "-" + o.hash
	if o.device != "" {
		name += "-" + o.device
	}
	return name
}

// parseServiceObject takes the name of a service's object apart; ok is false for a shared object
// and any name Sluice does not render.
func parseServiceObject(name string) (o serviceObject, ok bool) {
	for _, kind := range serviceKinds {
		rest, ok := strings.CutPrefix(name, string(kind)+"-")
		if !ok {
			continue
		}
		rest, last, ok := cutLast(rest)
		if !ok || !isHex(last) {
			return serviceObject{}, false
		}
		if kind == backendChains && len(last) == 4 {
			r, h, ok := cutLast(rest)
			if !ok || len(h) != 8 || !isHex(h) {
				return serviceObject{}, false
			}
			return serviceObject{kind: kind, service: r, hash: h, device: last}, true
		}
		if len(last) != 8 {
			return serviceObject{}, false
		}
		return serviceObject{kind: kind, service: rest, hash: last}, true
	}
	return serviceObject{}, false
}

// isServiceObject tells whether name is an object of that kind of some service.
func isServiceObject(name string, kind serviceKind) bool {
	o, ok := parseServiceObject(name)
	return ok && o.kind == kind
}

// serviceOf is the service an object of that name was rendered for, "" for a shared object.
func serviceOf(name string) string {
	o, _ := parseServiceObject(name)
	return o.service
}

// serviceNames are the names of one service's chain and sets. Their hash covers everything the
// service chain's rules depend on, so a change of those makes new objects.
type serviceNames struct {
	chain, slots, prev, members, flows, marks, newFlows, live string

	// persist is the persistence map, none without persistence (see namesOf).
	persist string
}

// namesOf names the objects rendered for a service.
func namesOf(s *plan.Service) serviceNames {
	parts := []string{describe(s), strconv.Itoa(len(s.Slots)), string(s.Fallback), s.FlowTimeout.String()}
	// No tag without protection: the names of services without stay as they were.
	parts = append(parts, protectionTag(s)...)
	if givesSecondChance(s) {
		parts = append(parts, string(prevMap))
	}
	if limitsEvents(s) { // only then, as persistence below
		parts = append(parts, "replicated")
	}
	if keepsKernelTimeouts(s) { // only then, as persistence below
		parts = append(parts, "kernel-timeouts")
	}
	if s.Persistence > 0 { // only then: the names of services without persistence stay as they were
		parts = append(parts, s.Persistence.String(), strconv.Itoa(s.PersistencePrefix))
	}
	n := serviceNamesOf(s.Name, hash8(parts...))
	if s.Persistence > 0 {
		// Not the chain's hash: the clients it remembers outlive any change but one of the map's
		// own type or timeout (a change of the slot count, under rr and wrr a change of weight,
		// renames the chain).
		n.persist = serviceObject{kind: persistMap, service: s.Name, hash: hash8(ipvOf(s.VIP).ip, strconv.Itoa(s.PersistencePrefix), s.Persistence.String())}.String()
	}
	return n
}

// serviceNamesOf names the objects of a service whose chain is "svc-<service>-<hash>".
func serviceNamesOf(service, hash string) serviceNames {
	name := func(k serviceKind) string { return serviceObject{kind: k, service: service, hash: hash}.String() }
	return serviceNames{
		chain: name(serviceChain), slots: name(slotsMap), prev: name(prevMap), members: name(membersMap),
		flows: name(flowsMap), marks: name(marksMap), newFlows: name(newFlowsMap),
		live: name(liveSet),
	}
}

// backendChain names the chain that sends flows to one backend. Its variant changes its rules: a
// DSR chain depends on the device it forwards out of, a nat chain of a service with persistence
// clears the mark (markCleared); every backend's slots are counted under the variant-less name.
func backendChain(service, proto, backendID, variant string) string {
	o := serviceObject{kind: backendChains, service: service, hash: hash8(proto, backendID)}
	if variant != "" {
		o.device = hash8(variant)[:4]
	}
	return o.String()
}

// markCleared is the variant of the nat backend chains of a service with persistence, which use
// the packet mark to carry the backend's mark and clear it before the packet goes on. No device
// has this name.
const markCleared = "mark cleared"

// withoutDevice is the variant-less name of a backend chain (see backendChain); other names are
// returned as they are.
func withoutDevice(chain string) string {
	o, ok := parseServiceObject(chain)
	if !ok || o.kind != backendChains {
		return chain
	}
	o.device = ""
	return o.String()
}

// counterName names one of a backend's counters ("c-web-<hash of the backend ID>").
func counterName(kind serviceKind, service, backendID string) string {
	return serviceObject{kind: kind, service: service, hash: hash8(backendID)}.String()
}

// gotoVerdict is the verdict of a map element that sends a packet to chain.
func gotoVerdict(chain string) string { return "goto " + chain }

// parseGoto is the chain a goto verdict sends to.
func parseGoto(verdict string) (chain string, ok bool) { return strings.CutPrefix(verdict, "goto ") }

// cutLast cuts s at its last '-'.
func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, '-')
	if i <= 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

func isHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return s != ""
}

func hash8(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:4])
}
