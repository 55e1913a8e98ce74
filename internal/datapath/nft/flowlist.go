package nft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/nlattr"
)

// tcpStates names conntrack's TCP states (enum tcp_conntrack), as ipvsadm -Lnc and conntrack -L do.
var tcpStates = []string{"NONE", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT", "CLOSE_WAIT", "LAST_ACK", "TIME_WAIT", "CLOSE", "SYN_SENT2"}

// Flows lists the flows of a service: its conntrack entries under nat and fullnat, the elements
// of its flow map under dsr. Both are read as netlink dumps, a message at a time, keeping only
// the flows within the limit.
func (d *Datapath) Flows(ctx context.Context, service string, filter datapath.FlowFilter) (datapath.FlowList, error) {
	if err := ctx.Err(); err != nil {
		return datapath.FlowList{}, err
	}
	st, svc, err := readServiceNamed(service)
	if err != nil {
		return datapath.FlowList{}, err
	}
	list := flowCollector{filter: filter, flows: []datapath.Flow{}}
	if svc.mode == config.ModeDSR {
		err = list.addFlowMap(st, svc)
	} else {
		err = list.addConntrack(svc)
	}
	slices.SortFunc(list.flows, func(a, b datapath.Flow) int { return a.Client.Compare(b.Client) })
	return datapath.FlowList{Flows: list.flows, Total: list.total}, err
}

// readServiceNamed reads the dispatch maps and finds the named service in them, with its sets.
func readServiceNamed(name string) (*state, dispatchedService, error) {
	st := newState()
	for _, f := range dispatchOrder {
		for _, v := range []ipv{ipv4, ipv6} {
			for _, m := range dispatchMaps(v) {
				if err := readSet(st, f, m); err != nil {
					return nil, dispatchedService{}, err
				}
			}
		}
	}
	found := dispatchedServices(st, name)
	if len(found) == 0 {
		return nil, dispatchedService{}, fmt.Errorf("service %q: %w", name, datapath.ErrNoService)
	}
	for _, obj := range found[0].sets() {
		if err := readSet(st, found[0].family, obj); err != nil {
			return nil, dispatchedService{}, err
		}
	}
	return st, found[0], nil
}

// flowCollector keeps the flows its filter selects, up to the limit, and counts them all.
type flowCollector struct {
	filter datapath.FlowFilter
	flows  []datapath.Flow
	total  int
}

func (c *flowCollector) add(f datapath.Flow) {
	if !c.filter.Keeps(f.Backend) {
		return
	}
	c.total++
	if len(c.flows) < c.filter.Limit {
		c.flows = append(c.flows, f)
	}
}

// addConntrack adds the translated conntrack entries of a nat or fullnat service's flows.
func (c *flowCollector) addConntrack(svc dispatchedService) error {
	proto := protoNumbers[string(svc.protocol)]
	family := conntrackFamily(ipvOf(svc.vip))
	return eachCTEntry(family, func(e ctEntry) {
		if e.flow.proto != proto || e.flow.vip != svc.vip || !svc.ports.Contains(int(e.flow.vport)) || !e.flow.translated() {
			return
		}
		f := datapath.Flow{
			Protocol: svc.protocol, Client: e.Orig.Src, VIP: e.Orig.Dst, Backend: e.Reply.Src,
			State: ctState(e), ExpiresIn: e.Timeout,
		}
		if svc.mode == config.ModeFullNAT {
			f.NATPort = e.Reply.Dst.Port()
		}
		c.add(f)
	})
}

// ctState names an entry's state: its TCP state, or whether a datagram flow was answered.
func ctState(e ctEntry) string {
	switch {
	case e.flow.proto != unix.IPPROTO_TCP && e.SeenReply():
		return "REPLIED"
	case e.flow.proto != unix.IPPROTO_TCP:
		return "UNREPLIED"
	case int(e.TCPState) < len(tcpStates):
		return tcpStates[e.TCPState]
	}
	return strconv.Itoa(int(e.TCPState))
}

// addFlowMap adds the elements of a dsr service's flow map: each keys a flow by the client's
// address and port and the VIP's port (see flowMapMark), and holds its backend's mark.
func (c *flowCollector) addFlowMap(st *state, svc dispatchedService) error {
	set := svc.names().flows
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETSETELEM, unix.NLM_F_DUMP)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: nfproto[knftables.NetDevFamily], Version: unix.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(unix.NFTA_SET_ELEM_LIST_TABLE, nl.ZeroTerminated(TableName)))
	req.AddData(nl.NewRtAttr(unix.NFTA_SET_ELEM_LIST_SET, nl.ZeroTerminated(set)))
	var bad error
	err := req.ExecuteIter(unix.NETLINK_NETFILTER, unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWSETELEM, func(msg []byte) bool {
		for _, list := range attrsOf(msg) {
			if list.Attr.Type&nl.NLA_TYPE_MASK != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
				continue
			}
			for _, raw := range nlattr.Nested(list.Value) {
				f, ok, err := dsrFlowOf(st, svc, raw.Value)
				if err != nil {
					bad = err
					return false
				}
				if ok {
					c.add(f)
				}
			}
		}
		return true
	})
	switch {
	case bad != nil:
		return fmt.Errorf("reading %s: %w", set, bad)
	case errors.Is(err, unix.ENOENT):
		return nil // no flow yet
	case err != nil && !errors.Is(err, nl.ErrDumpInterrupted):
		return fmt.Errorf("reading %s: %w", set, err)
	}
	return nil
}

// dsrFlowOf decodes one element of a dsr flow map; ok is false for a flow whose backend left
// the service (its mark names no member), which the packet path forgets.
func dsrFlowOf(st *state, svc dispatchedService, b []byte) (f datapath.Flow, ok bool, err error) {
	var key, value []byte
	var expiresMS uint64
	for _, a := range nlattr.Nested(b) {
		switch a.Attr.Type & nl.NLA_TYPE_MASK {
		case unix.NFTA_SET_ELEM_KEY:
			key = dataValue(a.Value)
		case unix.NFTA_SET_ELEM_DATA:
			value = dataValue(a.Value)
		case unix.NFTA_SET_ELEM_EXPIRATION:
			if len(a.Value) == 8 {
				expiresMS = binary.BigEndian.Uint64(a.Value)
			}
		}
	}
	if len(value) != 4 {
		return f, false, fmt.Errorf("cannot read element key %x value %x", key, value)
	}
	mark := strconv.FormatUint(uint64(binary.NativeEndian.Uint32(value)), 10)
	if svc.vip.Is6() && len(key) == 4 {
		// A hash of the flow (dsrFlowKey): its client and port are not known.
		backend, err := svc.backend(st, mark, 0)
		return datapath.Flow{Protocol: svc.protocol, VIP: netip.AddrPortFrom(svc.vip, 0), Backend: backend, ExpiresIn: seconds(expiresMS)}, err == nil, nil
	}
	if len(key) != svc.vip.BitLen()/8+8 {
		return f, false, fmt.Errorf("cannot read element key %x value %x", key, value)
	}
	client, _ := netip.AddrFromSlice(key[:len(key)-8])
	vport := binary.BigEndian.Uint16(key[len(key)-4:])
	backend, err := svc.backend(st, mark, vport)
	if err != nil {
		return f, false, nil
	}
	return datapath.Flow{
		Protocol: svc.protocol, Client: netip.AddrPortFrom(client, binary.BigEndian.Uint16(key[len(key)-8:])),
		VIP: netip.AddrPortFrom(svc.vip, vport), Backend: backend, ExpiresIn: seconds(expiresMS),
	}, true, nil
}

// seconds rounds milliseconds up to whole seconds, saturating.
func seconds(ms uint64) uint32 {
	s := ms / 1000
	if ms%1000 != 0 {
		s++
	}
	return uint32(min(s, uint64(^uint32(0))))
}
