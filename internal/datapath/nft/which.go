package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/ctnetlink"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/nlattr"
	"github.com/sluicelb/sluice/internal/plan"
)

// Which tells the backend the nft datapath gives a flow from src to the service at vip, from the
// tables and flows the kernel holds: the backend a tracked flow keeps (its conntrack entry under
// nat and fullnat, its element of the service's flow map under dsr), or for a new flow the slot
// table's backend at the slot the kernel's jhash gives it (see flowSlot), unless the service's
// access lists drop the new flow (Choice.Dropped). Nothing is changed.
func (d *Datapath) Which(protocol string, vip, src netip.AddrPort) (datapath.Choice, error) {
	proto, ok := protoNumbers[protocol]
	if !ok {
		return datapath.Choice{}, fmt.Errorf("protocol %q: want tcp or udp", protocol)
	}
	vip = netip.AddrPortFrom(vip.Addr().Unmap(), vip.Port())
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	if vip.Addr().Is4() != src.Addr().Is4() {
		return datapath.Choice{}, fmt.Errorf("%s and %s are not of one IP version", vip, src)
	}
	st := newState()
	for _, f := range dispatchOrder {
		for _, m := range dispatchMaps(ipvOf(vip.Addr())) {
			if err := readSet(st, f, m); err != nil {
				return datapath.Choice{}, err
			}
		}
	}
	svc, ok := lookupService(st, config.Protocol(protocol), vip)
	if !ok {
		return datapath.Choice{}, fmt.Errorf("%s/%s is not a service of the nft datapath here", vip, protocol)
	}
	for _, obj := range append(svc.sets(), svc.accessLists(vip.Addr())...) {
		if err := readSet(st, svc.family, obj); err != nil {
			return datapath.Choice{}, err
		}
	}
	c := datapath.Choice{Service: svc.name, Mode: svc.mode}
	var err error
	if svc.mode == config.ModeDSR {
		c.Backend, c.Tracked, err = svc.rememberedBackend(st, src, vip)
	} else {
		c.Backend, c.NATPort, c.Tracked, err = svc.conntrackBackend(proto, src, vip)
	}
	if err != nil || c.Tracked {
		return c, err
	}
	// A tracked flow never meets the access lists: they judge new flows, before persistence.
	if c.Dropped = svc.refusal(st, src, vip); c.Dropped != "" {
		return c, nil
	}
	if c.Backend, ok, err = svc.rememberedClient(st, src, vip); err != nil || ok {
		return c, err
	}
	c.Backend, err = svc.newFlowBackend(st, src, vip)
	return c, err
}

// dispatchOrder is the order in which a packet meets the dispatch maps' families: the netdev
// table's ingress chains (dsr) run before the inet table's nat hooks.
var dispatchOrder = []knftables.Family{knftables.NetDevFamily, knftables.InetFamily}

// readSet reads the elements of one of Sluice's sets or maps into st; one that is not there
// reads as empty.
func readSet(st *state, f knftables.Family, obj knftables.Object) error {
	def := st.addSet(f, obj)
	name := setName(obj)
	if err := readElements(def, f, name); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("reading %s %s: %w", f, name, err)
	}
	return nil
}

// programmedService is a service as its dispatch element describes it (see describe).
type programmedService struct {
	name      string
	protocol  config.Protocol
	mode      config.Mode
	scheduler config.Scheduler
	shPort    bool // sh hashes the source port too
	// persistPrefix groups clients for persistence; -1 without persistence.
	persistPrefix int
	family        knftables.Family
	// hash names the service's chain and sets with its name (see serviceNamesOf).
	hash string
}

// names are the names of the service's chain and sets.
func (s programmedService) names() serviceNames { return serviceNamesOf(s.name, s.hash) }

// lookupService finds the service a packet of protocol to vip is dispatched to, looking where
// the kernel looks, in its order: the netdev table before the inet table, and in each the hash
// map of single-port services before the interval map of port ranges.
func lookupService(st *state, protocol config.Protocol, vip netip.AddrPort) (programmedService, bool) {
	for _, f := range dispatchOrder {
		for _, m := range dispatchMaps(ipvOf(vip.Addr())) {
			def := st.sets[objKey{f, m.Name}]
			if def == nil {
				continue
			}
			for _, e := range def.elems {
				if s, ok := dispatchedBy(f, e); ok && s.serves(protocol, vip) {
					return s.programmedService, true
				}
			}
		}
	}
	return programmedService{}, false
}

// dispatchedServices reads the services of the dispatch maps st holds (only the one named, unless
// name is empty), sorted by name: a service on several ports has an element per entry of its
// ports, and its ports are theirs together.
func dispatchedServices(st *state, name string) []dispatchedService {
	byName := map[string]*dispatchedService{}
	for _, k := range sortedKeys(st.sets) {
		if !isShared(k.name, dispatchKind) {
			continue
		}
		for _, e := range st.sets[k].elems {
			d, ok := dispatchedBy(k.family, e)
			switch {
			case !ok || (name != "" && d.name != name):
			case byName[d.name] != nil:
				byName[d.name].ports = append(byName[d.name].ports, d.ports...)
			default:
				byName[d.name] = &d
			}
		}
	}
	out := make([]dispatchedService, 0, len(byName))
	for _, d := range byName {
		d.ports = d.ports.Canonical()
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b dispatchedService) int { return strings.Compare(a.name, b.name) })
	return out
}

// dispatchedService is a dispatch element read: the service and what it dispatches.
type dispatchedService struct {
	programmedService
	vip   netip.Addr
	ports config.PortList
}

func (s dispatchedService) serves(protocol config.Protocol, vip netip.AddrPort) bool {
	return s.protocol == protocol && s.vip == vip.Addr() && s.ports.Contains(int(vip.Port()))
}

// dispatchedBy reads a dispatch element: its comment describes the service, its verdict names it.
func dispatchedBy(f knftables.Family, e *knftables.Element) (dispatchedService, bool) {
	if e.Comment == nil || len(e.Value) != 1 {
		return dispatchedService{}, false
	}
	desc := strings.Fields(*e.Comment)
	chain, ok := parseGoto(e.Value[0])
	if !ok || len(desc) < 6 {
		return dispatchedService{}, false
	}
	o, ok := parseServiceObject(chain)
	if !ok || o.kind != serviceChain || o.service != desc[0] {
		return dispatchedService{}, false
	}
	svc := programmedService{name: desc[0], protocol: config.Protocol(desc[1]), mode: config.Mode(desc[4]), scheduler: config.Scheduler(desc[5]),
		persistPrefix: -1, family: f, hash: o.hash}
	for _, opt := range desc[6:] {
		prefix, persists := strings.CutPrefix(opt, persistOption)
		n, err := strconv.Atoi(prefix)
		switch {
		case opt == shPortOption:
			svc.shPort = true
		case persists && err == nil && n >= 0:
			svc.persistPrefix = n
		default:
			return dispatchedService{}, false
		}
	}
	vip, err1 := netip.ParseAddr(desc[2])
	ports, err2 := config.ParsePortList(desc[3])
	if err1 != nil || err2 != nil {
		return dispatchedService{}, false
	}
	return dispatchedService{programmedService: svc, vip: vip, ports: ports}, true
}

// sets are the service's sets Which reads: its slots, its members, the map of backend marks
// (dsr, and nat or fullnat with persistence; none otherwise) and the marks of the backends that
// take new flows (the new-flow map under dsr, the live set with persistence).
func (s programmedService) sets() []knftables.Object {
	n := s.names()
	return []knftables.Object{&knftables.Map{Name: n.slots}, &knftables.Map{Name: n.members}, &knftables.Map{Name: n.marks},
		&knftables.Map{Name: n.newFlows}, &knftables.Set{Name: n.live}}
}

// accessLists are the service's source_deny and source_allow sets of vip's IP version, in the
// order its rules judge a new flow (see protectionRules).
func (s programmedService) accessLists(vip netip.Addr) []knftables.Object {
	named := &plan.Service{Name: s.name, VIP: vip}
	return []knftables.Object{&knftables.Set{Name: protectionName(named, denyList, 0)}, &knftables.Set{Name: protectionName(named, allowList, 0)}}
}

// refusal tells why the service's access lists, as read into st, drop a new flow from src
// (datapath.SourceRefusal): a source_deny prefix holds it, or a source_allow list does not. Each
// element's comment is its prefix (see protectionRules). "" when they let it through.
func (s programmedService) refusal(st *state, src, vip netip.AddrPort) string {
	lists := s.accessLists(vip.Addr())
	containing := func(list knftables.Object) (in netip.Prefix, listed bool) {
		def := st.sets[objKey{s.family, setName(list)}]
		if def == nil {
			return netip.Prefix{}, false
		}
		for _, e := range def.elems {
			if e.Comment == nil {
				continue
			}
			if p, err := netip.ParsePrefix(*e.Comment); err == nil && p.Contains(src.Addr()) {
				return p, true
			}
		}
		return netip.Prefix{}, len(def.elems) > 0
	}
	denied, _ := containing(lists[0])
	allowedBy, allowList := containing(lists[1])
	return datapath.SourceRefusal(denied, !allowList || allowedBy.IsValid())
}

// rememberedClient is the backend a service with persistence remembers for src's client key,
// when that backend takes new flows (otherwise the client is balanced anew: see forget).
func (s programmedService) rememberedClient(st *state, src, vip netip.AddrPort) (netip.AddrPort, bool, error) {
	if s.persistPrefix < 0 {
		return netip.AddrPort{}, false, nil
	}
	set, err := s.persistenceMap()
	if err != nil || set == "" {
		return netip.AddrPort{}, false, err
	}
	key := netip.PrefixFrom(src.Addr(), s.persistPrefix).Masked().Addr().AsSlice()
	mark, found, err := elementMark(s.family, set, key)
	if err != nil || !found {
		return netip.AddrPort{}, false, err
	}
	n, value := s.names(), strconv.FormatUint(uint64(mark), 10)
	live := false
	for _, name := range []string{n.newFlows, n.live} {
		if def := st.sets[objKey{s.family, name}]; def != nil {
			for _, e := range def.elems {
				live = live || strings.Join(e.Key, "") == value
			}
		}
	}
	if !live {
		return netip.AddrPort{}, false, nil
	}
	b, err := s.backend(st, value, vip.Port())
	return b, err == nil, err
}

// persistenceMap finds the name of the service's persistence map, which its chain's hash does
// not name (see namesOf); "" when there is none.
func (s programmedService) persistenceMap() (string, error) {
	sets, err := dumpTable(s.family, unix.NFT_MSG_GETSET, unix.NFT_MSG_NEWSET, unix.NFTA_SET_TABLE)
	if err != nil && !errors.Is(err, errNoTable) {
		return "", err
	}
	for _, m := range sets {
		name, _ := setOf(m)
		if o, ok := parseServiceObject(name); ok && o.kind == persistMap && o.service == s.name {
			return name, nil
		}
	}
	return "", nil
}

// newFlowBackend is the backend of the slot the service's selector gives a new flow.
func (s programmedService) newFlowBackend(st *state, src, vip netip.AddrPort) (netip.AddrPort, error) {
	if s.scheduler != config.SchedulerMaglev && s.scheduler != config.SchedulerHash && s.scheduler != config.SchedulerSH {
		return netip.AddrPort{}, fmt.Errorf("service %s picks a new flow's backend by %s scheduling, not by a hash of the flow: it cannot be told in advance", s.name, s.scheduler)
	}
	slots := st.sets[objKey{s.family, s.names().slots}]
	if slots == nil || len(slots.elems) == 0 {
		return netip.AddrPort{}, fmt.Errorf("service %s has no backend for new flows", s.name)
	}
	n := len(slots.elems)
	slotOf := flowSlot(src, vip, n)
	if s.scheduler == config.SchedulerSH {
		slotOf = shSlot(src, s.shPort, n)
	}
	slot := strconv.FormatUint(uint64(slotOf), 10)
	for _, e := range slots.elems {
		if len(e.Key) == 1 && e.Key[0] == slot {
			return s.backend(st, strings.Join(e.Value, ""), vip.Port())
		}
	}
	return netip.AddrPort{}, fmt.Errorf("service %s: slot %s of %d is not in its slot table", s.name, slot, len(slots.elems))
}

// backend resolves what a slot or a remembered flow holds (a goto to a backend chain, or under
// dsr a backend mark) to the member whose chain it is; a member without a port takes the one
// the client asked for.
func (s programmedService) backend(st *state, value string, vport uint16) (netip.AddrPort, error) {
	n := s.names()
	chain := backendChainOf(st, s.family, n.marks)(value)
	if members := st.sets[objKey{s.family, n.members}]; members != nil {
		for _, e := range members.elems {
			if len(e.Key) != 2 {
				continue
			}
			addr, err1 := netip.ParseAddr(e.Key[0])
			port, err2 := strconv.ParseUint(e.Key[1], 10, 16)
			if err1 != nil || err2 != nil {
				continue
			}
			if backendChain(s.name, string(s.protocol), plan.Backend{Addr: addr, Port: uint16(port)}.ID(), "") != chain {
				continue
			}
			if port == 0 {
				port = uint64(vport)
			}
			return netip.AddrPortFrom(addr, uint16(port)), nil
		}
	}
	return netip.AddrPort{}, fmt.Errorf("service %s sends the flow to %q, which is none of its members", s.name, value)
}

// conntrackBackend looks the flow's conntrack entry up: tracked when there is one, with the
// backend it was translated to and, under fullnat, the source port it was masqueraded to.
func (s programmedService) conntrackBackend(proto uint8, src, vip netip.AddrPort) (backend netip.AddrPort, natPort uint16, tracked bool, err error) {
	reply, found, err := conntrackReply(proto, src, vip)
	if err != nil || !found {
		return netip.AddrPort{}, 0, false, err
	}
	if reply.Src == vip {
		return netip.AddrPort{}, 0, false, fmt.Errorf("conntrack tracks %s -> %s untranslated (it began before service %s could balance it): it reaches no backend until it ends", src, vip, s.name)
	}
	if s.mode == config.ModeFullNAT {
		natPort = reply.Dst.Port()
	}
	return reply.Src, natPort, true, nil
}

// conntrackReply is the reply direction of the conntrack entry whose original direction is
// src -> dst.
func conntrackReply(proto uint8, src, dst netip.AddrPort) (reply ctnetlink.Tuple, found bool, err error) {
	var e ctnetlink.Entry
	err = withConntrack(func(s *ctnetlink.Socket) error {
		e, found, err = s.Get(ctnetlink.Tuple{Proto: proto, Src: src, Dst: dst})
		return err
	})
	if err != nil {
		return ctnetlink.Tuple{}, false, fmt.Errorf("looking the flow up in conntrack: %w", err)
	}
	return e.Reply, found, nil
}

// rememberedBackend looks the flow up in the dsr service's flow map: tracked when it holds the
// flow, with the backend of its mark.
func (s programmedService) rememberedBackend(st *state, src, vip netip.AddrPort) (netip.AddrPort, bool, error) {
	mark, found, err := flowMapMark(s.names().flows, src, vip)
	if err != nil || !found {
		return netip.AddrPort{}, false, err
	}
	b, err := s.backend(st, strconv.FormatUint(uint64(mark), 10), vip.Port())
	return b, err == nil, err
}

// flowMapMark gets the element of a dsr flow map for the flow src -> vip: its key is the
// registers of `ip saddr . <proto> sport . <proto> dport`, each padded to 4 bytes (IPv6: their
// hash, dsrFlowHash), and its value the backend mark.
func flowMapMark(set string, src, vip netip.AddrPort) (mark uint32, found bool, err error) {
	if src.Addr().Is6() {
		return elementMark(knftables.NetDevFamily, set, binary.NativeEndian.AppendUint32(nil, dsrFlowHash(src, vip.Port())))
	}
	key := append(src.Addr().AsSlice(), 0, 0, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint16(key[len(key)-8:], src.Port())
	binary.BigEndian.PutUint16(key[len(key)-4:], vip.Port())
	return elementMark(knftables.NetDevFamily, set, key)
}

// elementMark gets the mark that the element of key holds in a map of family f's table.
func elementMark(f knftables.Family, set string, key []byte) (mark uint32, found bool, err error) {
	keyData := nl.NewRtAttr(unix.NLA_F_NESTED|unix.NFTA_SET_ELEM_KEY, nil)
	keyData.AddRtAttr(unix.NFTA_DATA_VALUE, key)
	elem := nl.NewRtAttr(unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM, nil)
	elem.AddChild(keyData)
	list := nl.NewRtAttr(unix.NLA_F_NESTED|unix.NFTA_SET_ELEM_LIST_ELEMENTS, nil)
	list.AddChild(elem)

	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETSETELEM, unix.NLM_F_ACK)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: nfproto[f], Version: unix.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(unix.NFTA_SET_ELEM_LIST_TABLE, nl.ZeroTerminated(TableName)))
	req.AddData(nl.NewRtAttr(unix.NFTA_SET_ELEM_LIST_SET, nl.ZeroTerminated(set)))
	req.AddData(list)
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWSETELEM)
	if errors.Is(err, unix.ENOENT) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("looking the element up in %s: %w", set, err)
	}
	for _, m := range msgs {
		for _, l := range attrsOf(m) {
			if l.Attr.Type&nl.NLA_TYPE_MASK != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
				continue
			}
			for _, e := range nlattr.Nested(l.Value) {
				for _, a := range nlattr.Nested(e.Value) {
					if value := dataValue(a.Value); a.Attr.Type&nl.NLA_TYPE_MASK == unix.NFTA_SET_ELEM_DATA && len(value) == 4 {
						return binary.NativeEndian.Uint32(value), true, nil
					}
				}
			}
		}
	}
	return 0, false, fmt.Errorf("%s answered without the element's mark", set)
}
